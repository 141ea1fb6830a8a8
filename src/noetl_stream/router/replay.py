"""Replaying an execution as a new one (`noetl-stream replay`). Pure, part of the router.

A replay is a new execution of the original's playbook, linked to it, that starts at a step
instead of the start step: the steps before it are seeded with the results the original recorded
and are not run. The seed is computed from the original's state (`seed_of`) by whoever asks,
travels in the execution request, and is repeated in the new execution's `execution.started`,
so the new log alone rebuilds its state (`noetl-stream verify`).

What runs: the step named (`from_step`) and every step downstream of it along forward arcs, as
for a restart (router/restart.py); without a step, the steps that failed or were cancelled (or
the start step, for an execution that did neither). Every completed or skipped step of the
original outside that set is seeded with its status and result (runs 0: it did not run here).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from noetl_stream import ids
from noetl_stream.dsl import execution_limits
from noetl_stream.dsl.models import Playbook
from noetl_stream.router.engine import Engine
from noetl_stream.router.restart import arm_joins, downstream, stopped_steps
from noetl_stream.router.state import ExecutionState

SEEDED = frozenset({"completed", "skipped"})


def seed_of(playbook: Playbook, original: ExecutionState, from_step: str | None) -> dict[str, Any]:
    """The seed of a replay of `original` (its results loaded) from `from_step`.

    Raises ValueError naming the step when the playbook does not have it.
    """
    if from_step is not None and from_step not in playbook.step_index:
        raise ValueError(f'the playbook has no step "{from_step}"')
    roots = [from_step] if from_step is not None else \
        stopped_steps(playbook, original) or [playbook.start_step.name]
    again = set(downstream(playbook, roots))
    steps = {name: {"status": rec.status, "result": rec.result}
             for name, rec in original.steps.items()
             if rec.status in SEEDED and name not in again and name in playbook.step_index}
    return {"of": original.execution_id, "from_step": from_step, "roots": roots, "steps": steps}


def start_replay(playbook: Playbook, seed: dict[str, Any], *, execution_id: str,
                 playbook_key: str, workload: dict[str, Any], now: float,
                 parent_execution_id: str | None = None,
                 parent_iter: dict[str, Any] | None = None,
                 concurrency: Mapping[str, Any] | None = None,
                 labels: Mapping[str, str] | None = None,
                 playbook_file: str | None = None) -> ExecutionState:
    """The replay's first state: the seeded records, then tokens at the seed's roots."""
    if concurrency or execution_limits.concurrency_of(playbook.executor) is not None:
        # A replay starts at its roots, not the start step the admission line fires: it would
        # run past the limit, so it is refused as a restart in place is (router/restart.py).
        raise ValueError("an execution under a concurrency limit is not replayed: start a new "
                         "one, which waits for a slot like any other")
    roots = [r for r in seed.get("roots", []) if isinstance(r, str)]
    unknown = [r for r in roots if r not in playbook.step_index]
    if not roots or unknown:
        raise ValueError(f"a replay must start at steps of the playbook: {roots or 'none given'}")
    state = ExecutionState(execution_id=execution_id, playbook_key=playbook_key, workload=workload,
                           playbook_path=playbook.path, playbook_name=playbook.name,
                           parent_execution_id=parent_execution_id, parent_iter=parent_iter,
                           started_at=now, replay_of=str(seed.get("of")), labels=dict(labels or {}),
                           playbook_file=playbook_file)
    engine = Engine(playbook, state, now)
    engine.emit("execution.started", ids.event_msg_id(execution_id, "execution.started"),
                playbook=playbook.name, path=playbook.path, file=playbook_file, workload=workload,
                replay_of=state.replay_of, replay=seed,
                **({"labels": dict(state.labels)} if state.labels else {}))
    again = downstream(playbook, roots)
    seeded = seed.get("steps")
    for name, kept in (seeded if isinstance(seeded, dict) else {}).items():
        if name in playbook.step_index and name not in again and isinstance(kept, dict) \
                and kept.get("status") in SEEDED:
            rec = state.record(name)
            rec.status = kept["status"]
            state.set_result(rec, kept.get("result"))
    arm_joins(engine, again, roots)
    for name in roots:
        engine.fire(name, {})
    engine.check_quiescence()
    return state
