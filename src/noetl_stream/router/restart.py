"""Restarting an execution in place (`noetl-stream restart`). Pure, part of the router.

A restart is the event `execution.restart.requested` in the execution's own log (who asked, from
which step, what changes in the workload), applied like any other, so the log still explains the
whole history and replaying it (`noetl-stream verify`) gives the same state.

Applying it reopens the execution: the steps to run again are the step it names (`from`) or,
without one, the steps that failed or were cancelled, each with every step downstream of it
(along forward arcs).
Their records go back to `pending` and keep their run counts, so their next runs have new run
ids, hence new command and event msg ids and new idempotency keys; every other step keeps its
status and result and is not run again. The workload is the old one with `workload` merged over
it. The first steps of the set fire at once, with no arguments (a finished run's arguments are
not kept); a join inside the set counts its predecessors outside the set as arrived when they
completed. A running or completed execution is restarted only from a named step: its runs in the
set are cut short first (their late outcomes are ignored, as for any run no longer in flight).

A restart the router cannot take (nothing to run again, an unknown step, a running or completed
execution without `from`) changes nothing and is answered with `event.ignored`.

A restart may name another version of the playbook (`playbook_key`, `restart --latest`): the
server then applies it with that version, which must hold every step the execution has a record
of; the state names the new version from then on, and `execution.restarted` names both.
"""

from __future__ import annotations

from noetl_stream import ids
from noetl_stream.dsl.layering import merge
from noetl_stream.dsl.models import Playbook
from noetl_stream.events import Replayed, RestartRequested
from noetl_stream.router import children
from noetl_stream.router.graph import graph_of
from noetl_stream.router.interface import Router
from noetl_stream.router.links import note_replay
from noetl_stream.router.state import ExecutionState, Join

REQUESTED = "execution.restart.requested"
RESTARTED = "execution.restarted"
REOPENED_FROM = frozenset({"failed", "cancelled"})


def refusal(playbook: Playbook, state: ExecutionState, from_step: str | None) -> str | None:
    """Why a restart cannot be applied to this state; None when it can."""
    missing = misfits(playbook, state)
    if missing:
        return ("the playbook has no step " + ", ".join(f'"{m}"' for m in missing)
                + " of the execution")
    if state.admission is not None:  # its slot was given up when it ended (router/admission.py)
        return ("an execution under a concurrency limit is not restarted in place: start a new "
                "one, which waits for a slot like any other")
    if from_step is not None:
        if from_step not in playbook.step_index:
            return f'the playbook has no step "{from_step}"'
        return None
    if state.status not in REOPENED_FROM:
        return (f"execution {state.execution_id} is {state.status}; only a failed or cancelled "
                "execution restarts without --from STEP")
    if not stopped_steps(playbook, state):
        return "no step failed or was cancelled: name the step to restart from with --from"
    return None


def misfits(playbook: Playbook, state: ExecutionState) -> list[str]:
    """Steps the execution has a record of that `playbook` does not have (another version's)."""
    return sorted(name for name in state.steps if name not in playbook.step_index)


def apply_restart(router: Router, event: RestartRequested) -> None:
    state = router.state
    from_step = event.from_step or None
    reason = refusal(router.pb, state, from_step)
    if reason is not None:
        router.emit("event.ignored", ids.event_msg_id(state.execution_id, "event.ignored", REQUESTED,
                                                      event.restart),
                    ignored=REQUESTED, reason=reason)
        return
    roots = [from_step] if from_step is not None else stopped_steps(router.pb, state)
    again = downstream(router.pb, roots)
    _cut_short(router, again)
    for name in again:
        rec = state.record(name)
        rec.status, rec.error, rec.http, rec.loop = "pending", None, None, False
        state.set_result(rec, None)
        state.joins.pop(name, None)
    versions = _switch_version(router, event.playbook_key)
    state.restarts += 1
    state.status = "running"
    state.error = None
    state.ended_at = None
    state.set_result(state, None)
    patch = event.workload
    if patch:
        state.workload = merge(state.workload, patch)
    router.emit(RESTARTED, ids.event_msg_id(state.execution_id, RESTARTED, state.restarts),
                restart=state.restarts, from_step=from_step, steps=again,
                requested_by=event.requested_by, workload=patch, **versions)
    arm_joins(router, again, roots)
    for name in roots:
        router.fire(name, {})


def _switch_version(router: Router, key: str | None) -> dict[str, str]:
    """The state names the version the restart was applied with (`router.pb`, the server's
    choice by the event's `playbook_key`); the keys for `execution.restarted` when it changed.
    """
    state = router.state
    if not key or key == state.playbook_key:
        return {}
    previous, state.playbook_key = state.playbook_key, key
    state.playbook_path, state.playbook_name = router.pb.path, router.pb.name
    # Its errors name the catalog entry it came from, not the file the first version was sent as.
    state.playbook_file = f"catalog:{router.pb.path}" if router.pb.path else key
    return {"playbook_key": key, "previous_playbook_key": previous}


def apply_any_status(router: Router, event: RestartRequested | Replayed) -> None:
    """Events applied whatever the execution's status: a restart reopens a finished execution,
    and a finished one may be replayed (router/links.py).
    """
    if isinstance(event, RestartRequested):
        apply_restart(router, event)
    else:
        note_replay(router, event)


def downstream(playbook: Playbook, roots: list[str]) -> list[str]:
    """`roots` and every step reachable from them by forward arcs, in playbook order. A back-edge
    (a retry or pagination cycle) leads to a step upstream: it runs again only if the token takes
    that arc, and keeps its result until then.
    """
    graph = graph_of(playbook)
    reached = set(roots)
    pending = list(roots)
    while pending:
        src = pending.pop()
        for arc in playbook.step(src).next.arcs:
            if arc.step in playbook.step_index and arc.step not in reached \
                    and not graph.is_back_edge(src, arc.step):
                reached.add(arc.step)
                pending.append(arc.step)
    return [s.name for s in playbook.steps if s.name in reached]


def stopped_steps(playbook: Playbook, state: ExecutionState) -> list[str]:
    """Steps that failed or were cancelled and are not downstream of another such step."""
    stopped = [s.name for s in playbook.steps
               if s.name in state.steps and state.steps[s.name].status in ("failed", "cancelled")]
    below: set[str] = set()
    for name in stopped:
        below |= set(downstream(playbook, [name])) - {name}
    return [name for name in stopped if name not in below]


def _cut_short(router: Router, again: list[str]) -> None:
    """Runs of the steps to run again that are still in flight end here (a running execution)."""
    state = router.state
    for run_id, run in list(state.runs.items()):
        if run.step in again:
            children.cancel_run(router, run, f"its parent {state.execution_id} was restarted")
            del state.runs[run_id]
    for timer_id, token in list(state.delayed.items()):
        if token.dst in again:
            del state.delayed[timer_id]


def arm_joins(router: Router, again: list[str], roots: list[str]) -> None:
    """A join in the set waits only for its predecessors that run again; the others count as
    they ended (arrived when completed).
    """
    state = router.state
    for name in again:
        preds = router.graph.forward_preds.get(name, ())
        if name in roots or not router.graph.is_join(name):
            continue
        kept = {p: state.steps[p].status == "completed" for p in preds
                if p not in again and p in state.steps}
        if kept:
            state.joins[name] = Join(arrived=kept)
