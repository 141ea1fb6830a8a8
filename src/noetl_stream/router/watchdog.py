"""The watchdog: step deadlines owned by the router (ARCHITECTURE §6.4). Pure, part of the router.

A step whose own effective `spec.timeout` is set (executor.spec <- step.spec <- loop.spec) gets a
deadline for each command it issues (the run, or each loop iteration): a durable timer, an
outbox message of kind `timer` like a delayed arc's, firing `timer.fired` with a `watchdog.<n>`
timer id. If that run or iteration is still in flight when it fires, the router publishes
`step.timeout` and fails it with error kind `timeout`, so the step's failure arcs apply as for
any failure; an outcome the worker sends later finds nothing in flight and changes nothing. The
child executions that run or iteration waits on are cancelled with it (router/children.py). A
timer whose run already finished is a no-op.

The budget of one command is what its tasks may legitimately take: each task's per-call timeout
(the step's, or the task's own where it overrides it) times the attempts its retry rules allow,
plus their backoff waits, plus a grace for the worker's own report to arrive first. Timeouts
set only by a kind's default arm no watchdog, so most commands cost no extra timer.
"""

from __future__ import annotations

from typing import Any

from noetl_stream import ids
from noetl_stream.dsl import layering
from noetl_stream.dsl.models import Playbook, Rule, Step, Task
from noetl_stream.router import children
from noetl_stream.router.interface import Router
from noetl_stream.router.state import Outgoing, Run

TIMER_PREFIX = "watchdog."  # a dot: no listener timer has such a name
GRACE_S = 2.0  # lets the worker's own timeout report win the race with the watchdog


def step_timeout_s(playbook: Playbook, step: Step) -> float | None:
    """The step's effective `spec.timeout` (without the kinds' defaults), or None."""
    loop_spec = step.loop.spec if step.loop is not None else {}
    spec = layering.merge(layering.layer_of(playbook.executor.get("spec")),
                          layering.layer_of(step.spec),
                          layering.layer_of(loop_spec,
                                            layering.SCOPED_KEYS | layering.LOOP_OWN_KEYS))
    seconds = layering.timeout_s(spec)
    return seconds if seconds is not None and seconds > 0 else None


def budget_s(playbook: Playbook, step: Step) -> float | None:
    """Seconds one command of `step` may run before the watchdog fails it; None: no watchdog."""
    base = step_timeout_s(playbook, step)
    if base is None:
        return None
    total = 0.0
    for task in step.tasks:
        per_call = layering.timeout_s(task.spec) or base
        attempts, waits = _retries(task)
        total += per_call * attempts + waits
    return max(total, base) + GRACE_S


def _retries(task: Task) -> tuple[int, float]:
    """Calls the task's most generous retry rule allows, and the longest its waits add up to."""
    best = (1, 0.0)
    for rule in task.rules:
        if rule.do != "retry":
            continue
        waits = sum(_wait(rule, attempt) for attempt in range(1, rule.attempts))
        if (rule.attempts, waits) > best:
            best = (rule.attempts, waits)
    return best


def _wait(rule: Rule, attempt: int) -> float:
    """The longest wait before attempt `attempt + 1` (jitter only ever shortens it)."""
    wait = rule.backoff_wait(attempt)
    return min(wait, rule.max_delay) if rule.max_delay is not None else wait


def arm(router: Router, step: Step, run: Run, index: int | None) -> None:
    """Record when a command went out and, for a step with a timeout, set its watchdog timer."""
    state = router.state
    if index is not None and run.loop is not None:
        run.loop.issued_at[str(index)] = router.now
    seconds = budget_s(router.pb, step)
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


def is_watchdog(event: dict[str, Any]) -> bool:
    timer_id = event.get("timer_id")
    return (event.get("event_type") == "timer.fired" and isinstance(timer_id, str)
            and timer_id.startswith(TIMER_PREFIX))


def on_fired(router: Router, event: dict[str, Any]) -> None:
    """A watchdog timer fired: fail its run or iteration if it is still waiting for an outcome."""
    run = router.state.runs.get(str(event.get("step_run_id")))
    if run is None or run.status != "running":
        return  # the run finished (or the timer was redelivered): nothing to do
    index = event.get("iteration")
    if index is None:
        if run.loop is not None:
            return
    elif (not isinstance(index, int) or isinstance(index, bool) or run.loop is None
          or index not in run.loop.in_flight):
        return
    timeout = event.get("timeout_s")
    seconds = float(timeout) if isinstance(timeout, (int, float)) else 0.0
    reason = f"no outcome within {seconds:g}s (spec.timeout)"
    error = {"message": reason, "kind": "timeout", "retryable": True, "source": "watchdog"}
    if index is not None:
        error["iteration"] = index
    router.emit("step.timeout", ids.event_msg_id(router.state.execution_id, "step.timeout",
                                                 run.run_id, index),
                step=run.step, step_run_id=run.run_id, iteration=index, reason=reason,
                timeout_s=seconds, error=error)
    # Before the failure is applied: it forgets the command's children as if they had ended.
    children.cancel_command(router, run, index, f"its parent's step {run.step} timed out: "
                                                f"{reason}")
    router.on_outcome({"event_type": "step.failed" if index is None else "loop.iteration.failed",
                       "execution_id": router.state.execution_id, "step": run.step,
                       "step_run_id": run.run_id, "iteration": index, "error": error})
