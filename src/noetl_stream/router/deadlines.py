"""Deadlines of a whole execution: `executor.spec.timeout` and `executor.spec.sla`. Pure, part of
the router.

Each is a durable timer (an outbox message of kind `timer`, a NATS message schedule, like a
step's watchdog: bus/timers.py), so it fires on nats-server's clock and survives any restart.
Their timer ids start with the watchdog's prefix, so watchers treat them as deadlines, not as
timers a listener set.

- The timeout counts from when the execution may run: its start, or its admission under a
  concurrency limit (time spent waiting for a slot is not running time). When it fires while
  the execution still runs, every command in flight gets `step.timeout` (the workers stop
  them), every running step fails, and the execution fails with kind `timeout` and the reason.
- The SLA counts from the request (waiting for a slot counts: it is what whoever waits for the
  result sees). When it fires while the execution still runs, `sla.missed` is emitted once, on
  the execution's own subject, naming the execution, playbook, max_duration and elapsed
  seconds; nothing else changes.

A timer that fires after the execution ended changes nothing (the router ignores events of a
finished execution).
"""

from __future__ import annotations

from noetl_stream import ids
from noetl_stream.dsl import execution_limits
from noetl_stream.events import TimerFired
from noetl_stream.jsonutil import JsonValue
from noetl_stream.router import children
from noetl_stream.router.interface import Router
from noetl_stream.router.state import Outgoing

PREFIX = "watchdog.execution."  # the watchdog's prefix: router/watchdog.py hands these over
TIMEOUT = PREFIX + "timeout"
SLA = PREFIX + "sla"
SLA_MISSED = "sla.missed"


def arm_timeout(router: Router) -> None:
    seconds = execution_limits.execution_timeout_s(router.pb.executor)
    if seconds is not None:
        _timer(router, TIMEOUT, router.now + seconds, seconds)


def arm_sla(router: Router) -> None:
    seconds = execution_limits.sla_s(router.pb.executor)
    if seconds is not None:
        _timer(router, SLA, router.state.started_at + seconds, seconds)


def _timer(router: Router, timer_id: str, fire_at: float, seconds: float) -> None:
    state = router.state
    body = {"event_type": "timer.fired", "execution_id": state.execution_id,
            "timer_id": timer_id, "fire_at": fire_at, "set_at": router.now, "seconds": seconds,
            "data": {"timer_id": timer_id, "name": timer_id}}
    # Restarts are refused for executions with a slot; a restarted one sets new timers.
    router.send(Outgoing("timer", ids.event_msg_id(state.execution_id, "timer", timer_id,
                                                   state.restarts), body,
                         event_type="timer.fired"))


def is_deadline(event: TimerFired) -> bool:
    return event.timer_id in (TIMEOUT, SLA)


def on_fired(router: Router, event: TimerFired) -> None:
    seconds = event.seconds or 0.0
    if event.timer_id == SLA:
        _sla_missed(router, seconds)
    else:
        _timed_out(router, seconds)


def _sla_missed(router: Router, seconds: float) -> None:
    state = router.state
    if state.sla_missed:
        return
    state.sla_missed = True
    router.emit(SLA_MISSED, ids.event_msg_id(state.execution_id, SLA_MISSED),
                playbook=router.pb.path or router.pb.name, max_duration_s=seconds,
                elapsed_s=round(router.now - state.started_at, 3),
                started_at=state.started_at)


def _timed_out(router: Router, seconds: float) -> None:
    """Fail the execution: its commands in flight are withdrawn, its running steps fail."""
    state = router.state
    reason = f"the execution ran longer than its timeout of {seconds:g}s (executor.spec.timeout)"
    error: dict[str, JsonValue] = {"message": reason, "kind": "timeout", "retryable": False,
                                   "source": "execution"}
    for run in state.active_runs:
        for index in list(run.loop.in_flight) if run.loop is not None else [None]:
            router.emit("step.timeout", ids.event_msg_id(state.execution_id, "step.timeout",
                                                         run.run_id, index),
                        step=run.step, step_run_id=run.run_id, iteration=index, reason=reason,
                        timeout_s=seconds, error=error)
        run.status = "failed"
        rec = state.record(run.step)
        rec.status, rec.error = "failed", error
        children.cancel_run(router, run, f"its parent {state.execution_id} timed out: {reason}")
    state.delayed.clear()
    state.joins.clear()
    state.status = "failed"
    state.error = dict(error)
