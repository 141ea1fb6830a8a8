"""The watchdog: step deadlines owned by the router (ARCHITECTURE §6.4). Pure, part of the router.

A step whose own effective `spec.timeout` is set (executor.spec <- step.spec <- loop.spec) gets a
deadline for each command it issues (the run, or each loop iteration): a durable timer, an
outbox message of kind `timer` like a delayed arc's, firing `timer.fired` with a `watchdog.<n>`
timer id. If that run or iteration is still in flight when it fires, the router publishes
`step.timeout` and fails it with error kind `timeout`, so the step's failure arcs apply as for
any failure; an outcome the worker sends later finds nothing in flight and changes nothing. The
child executions that run or iteration waits on are cancelled with it (router/children.py). A
timer whose run already finished is a no-op.

The budget of one command (router/budgets.py, found once per playbook by router/graph.py) is
what its tasks may legitimately take. Timeouts set only by a kind's default arm no watchdog, so
most commands cost no extra timer.
"""

from __future__ import annotations

from noetl_stream import ids
from noetl_stream.dsl.models import Step
from noetl_stream.events import ErrorInfo, OutcomeEvent, TimerFired
from noetl_stream.messages import outcome_event
from noetl_stream.router import children, deadlines
from noetl_stream.router.budgets import GRACE_S
from noetl_stream.router.interface import Router
from noetl_stream.router.state import Outgoing, Run

TIMER_PREFIX = "watchdog."  # a dot: no listener timer has such a name


def arm(router: Router, step: Step, run: Run, index: int | None) -> None:
    """Record when a command went out and, for a step with a timeout, set its watchdog timer."""
    state = router.state
    if index is not None and run.loop is not None:
        run.loop.issued_at[str(index)] = router.now
    seconds = router.graph.budgets[step.name]
    if seconds is None:
        return
    deadline = router.now + seconds
    if index is None:
        run.deadline = deadline
    elif run.loop is not None:
        run.loop.deadlines[str(index)] = deadline
    state.watchdogs_set += 1
    timer_id = f"{TIMER_PREFIX}{state.watchdogs_set}"
    body = {"event_type": "timer.fired", "execution_id": state.execution_id, "step": step.name,
            "step_run_id": run.run_id, "iteration": index, "timer_id": timer_id,
            "fire_at": deadline, "set_at": router.now, "timeout_s": seconds - GRACE_S,
            "data": {"timer_id": timer_id, "name": timer_id, "step": step.name}}
    router.send(Outgoing("timer", ids.event_msg_id(state.execution_id, "timer", timer_id),
                                 body, event_type="timer.fired"))


def is_watchdog(event: TimerFired) -> bool:
    return event.timer_id.startswith(TIMER_PREFIX)


def on_fired(router: Router, event: TimerFired) -> None:
    """A watchdog timer fired: fail its run or iteration if it is still waiting for an outcome."""
    if deadlines.is_deadline(event):  # the whole execution's (router/deadlines.py)
        deadlines.on_fired(router, event)
        return
    run = router.state.runs.get(event.step_run_id or "")
    if run is None or run.status != "running":
        return  # the run finished (or the timer was redelivered): nothing to do
    index = event.iteration
    if index is None:
        if run.loop is not None:
            return
    elif run.loop is None or index not in run.loop.in_flight:
        return
    seconds = event.timeout_s or 0.0
    reason = f"no outcome within {seconds:g}s (spec.timeout)"
    where = {} if index is None else {"iteration": index}
    error = ErrorInfo(message=reason, kind="timeout", retryable=True, source="watchdog", **where)
    router.emit("step.timeout", ids.event_msg_id(router.state.execution_id, "step.timeout",
                                                 run.run_id, index),
                step=run.step, step_run_id=run.run_id, iteration=index, reason=reason,
                timeout_s=seconds, error=error.model_dump(mode="json"))
    # Before the failure is applied: it forgets the command's children as if they had ended.
    children.cancel_command(router, run, index, f"its parent's step {run.step} timed out: "
                                                f"{reason}")
    router.on_outcome(OutcomeEvent.model_validate(outcome_event(
        ok=False, execution_id=router.state.execution_id, step=run.step, step_run_id=run.run_id,
        iteration=index, timestamp=router.now, error=error)))
