"""Why an execution waits: a plain report of one router state (for `noetl-stream status`). Pure.

A running execution waits on exactly what its state holds: runs in flight (a command, loop
iterations, or a listener's rules), delayed tokens behind their timers, and joins missing some
of their branches. A finished one has its result or error. `now` is the caller's clock.
"""

from __future__ import annotations

from typing import Any

from noetl_stream.dsl.models import Playbook
from noetl_stream.router.graph import graph_of
from noetl_stream.router.state import ExecutionState, Run


def explain(state: ExecutionState, playbook: Playbook | None, now: float) -> dict[str, Any]:
    """The report: status, what each running run waits for, delayed tokens, waiting joins."""
    report: dict[str, Any] = {
        "execution_id": state.execution_id,
        "status": state.status,
        "playbook": state.playbook_path or state.playbook_name,
        "parent_execution_id": state.parent_execution_id,
        "started_at": state.started_at,
        "events_applied": state.applied,
        "steps": {name: rec.status for name, rec in state.steps.items()},
    }
    if state.status != "running":
        # The last completed step's result: the execution's only when it completed.
        report["result"] = state.result if state.status == "completed" else None
        report["error"] = state.error
        return report
    report["running"] = [_run(run, playbook, now) for run in state.active_runs]
    if state.admission is not None:  # under a concurrency limit (router/admission.py)
        held = state.admission
        report["concurrency"] = {"group": held["group"], "limit": held["limit"],
                                 "on_limit": held["on_limit"], "waiting": held["waiting"]}
    report["delayed"] = [{"timer_id": timer_id, "from": token.src, "to": token.dst,
                          "fire_at": token.fire_at, "in_s": round(token.fire_at - now, 3)}
                         for timer_id, token in state.delayed.items()]
    graph = graph_of(playbook) if playbook is not None else None
    joins = []
    for step, join in state.joins.items():
        preds = graph.forward_preds.get(step, ()) if graph is not None else ()
        joins.append({"step": step,
                      "arrived": sorted(p for p, came in join.arrived.items() if came),
                      "ruled_out": sorted(p for p, came in join.arrived.items() if not came),
                      "waiting_for": sorted(p for p in preds if p not in join.arrived)})
    report["joins"] = joins
    return report


def _run(run: Run, playbook: Playbook | None, now: float) -> dict[str, Any]:
    step = _step(playbook, run.step)
    entry: dict[str, Any] = {"step": run.step, "step_run_id": run.run_id, "run": run.run_no,
                             "since": run.issued_at, "waiting_s": round(now - run.issued_at, 3)}
    if run.children:
        # child executions its commands started and that have not reported yet
        entry["children"] = sorted(child for ids in run.children.values() for child in ids)
    if step is not None and step.eval_mode == "on_event":
        entry["waits_for"] = "an event a listen rule accepts (signal or timer)"
        entry["listen"] = [rule.when for rule in step.listen if rule.when]
        return entry
    # The pool its commands went to: a pool no worker serves is where a step would wait.
    entry["pool"] = (step.pool if step is not None else None) or "default"
    if run.loop is None:
        entry["waits_for"] = f'the outcome of its command in pool "{entry["pool"]}"'
        entry["deadline"] = run.deadline
        entry["overdue"] = run.deadline is not None and now > run.deadline
        return entry
    loop = run.loop
    entry["waits_for"] = f'loop iterations in pool "{entry["pool"]}"'
    entry["iterations"] = {
        "total": None if loop.mode == "cursor" else len(loop.items), "done": loop.done,
        "next": loop.next_index,
        "in_flight": [{"index": i, "since": loop.issued_at.get(str(i)),
                       "deadline": loop.deadlines.get(str(i))} for i in loop.in_flight]}
    if loop.mode == "cursor":
        # Claiming slots: the loop ends once every one has found nothing left to claim.
        entry["iterations"]["slots"] = loop.max_in_flight
        entry["iterations"]["exhausted"] = loop.exhausted
    return entry


def _step(playbook: Playbook | None, name: str) -> Any:
    if playbook is None:
        return None
    try:
        return playbook.step(name)
    except KeyError:
        return None
