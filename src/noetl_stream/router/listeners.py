"""Listener steps (`eval_mode: on_event`, spec 001 §1.2): pure, part of the router.

A listener's run stays `running` (so the execution does not end while it listens) and runs no
command. Its `listen` rules are tried on step.enter and then on every event of the execution the
router applies: outcomes of other steps, external signals (`signal.<name>`) and `timer.fired`.
The first true rule writes ctx, asks for a durable timer (an outbox message of kind `timer`),
and leaves along its route (`next`) or fails the step (`fail`); with neither, the step keeps
listening. A signal or timer that no listener takes is answered with an `event.ignored` event,
so it is on record, and changes nothing else.

Each listener remembers the stream sequences of the signals and timers it heard (the latest
HEARD_KEPT), so a redelivered one (server crash between commit and ack) is not applied twice,
while one that arrives late, after a later one, is still heard.
"""

from __future__ import annotations

from collections.abc import Mapping

from noetl_stream import ids
from noetl_stream.dsl import templating
from noetl_stream.dsl.models import Playbook, Rule, Step, TimerSpec
from noetl_stream.errors import TemplateError
from noetl_stream.events import OutcomeEvent, TimerFired
from noetl_stream.jsonutil import JsonValue
from noetl_stream.messages import OUTCOME_EVENTS, SignalEvent
from noetl_stream.router.failures import template_failure
from noetl_stream.router.interface import Router
from noetl_stream.router.reads import rule_templates
from noetl_stream.router.state import ExecutionState, Outgoing, Run
from noetl_stream.router_events import RouterEvent

HEARD_KEPT = 256  # redeliveries come within a few AckWaits, far fewer signals than this apart

OUTCOMES = frozenset(OUTCOME_EVENTS)  # the worker's outcome types, as messages.py lists them


def is_external(event_type: str) -> bool:
    """Signals and timers: events only listeners act on."""
    return event_type.startswith("signal.") or event_type == "timer.fired"


def listening(playbook: Playbook, state: ExecutionState) -> list[str]:
    """Run ids of the listeners active now, in the order they started (deterministic)."""
    return [run.run_id for run in state.active_runs
            if playbook.step(run.step).eval_mode == "on_event"]


def event_view(event: RouterEvent) -> dict[str, object]:
    """What a listener's guard reads as `event`: `name`, `data`, `step`, `payload` (the event's
    fields as it came).
    """
    body = event.model_dump(exclude_unset=True)
    data = body.get("data")
    if isinstance(event, OutcomeEvent) and "data" not in body:
        data = {"step": event.step, "result": event.result, "error": event.error,
                "iteration": event.iteration}
    return {"name": event.event_type, "data": data, "step": body.get("step"),
            "payload": {k: v for k, v in body.items() if k != "data"}}


def hear_all(router: Router, run_ids: list[str], event: RouterEvent) -> None:
    """Offer `event` to the listeners that were active before it was applied."""
    etype = event.event_type
    seq = event.seq if isinstance(event, (SignalEvent, TimerFired)) else None
    heard = False
    if isinstance(event, TimerFired):
        _timer_fired(router, event)
    for run_id in run_ids:
        run = router.state.runs.get(run_id)
        if run is None or run.status != "running" or router.state.status != "running":
            continue
        if is_external(etype) and seq is not None:
            if seq in run.heard:
                heard = True  # already applied before a redelivery: not "unheard" either
                continue
            run.heard.append(seq)
            del run.heard[:-HEARD_KEPT]
        heard = hear(router, router.pb.step(run.step), run, event_view(event)) or heard
    if is_external(etype) and not heard and router.state.status == "running":
        reason = "no listener rule matched" if run_ids else "no step is listening"
        router.emit("event.ignored", ids.event_msg_id(router.state.execution_id, "event.ignored", etype,
                                                      seq if seq is not None else router.state.applied),
                    ignored=etype, reason=reason)


def hear(router: Router, step: Step, run: Run, view: Mapping[str, object]) -> bool:
    """Try the step's listen rules on one event; True when a rule matched."""
    extra = {"event": view}
    reads = rule_templates(step.listen)
    try:
        rule = _first(router, step, run, extra)
        if rule is None:
            return False
        if rule.set_ctx:
            router.state.ctx.update(templating.render_data(rule.set_ctx, router.context(
                reads=reads, args=run.args, extra=extra), step=step.name, field="case.set"))
        result = None
        if rule.result is not None:
            result = templating.render_data(rule.result, router.context(reads=reads, args=run.args,
                                                                    extra=extra),
                                       step=step.name, field="case.result")
    except TemplateError as exc:
        leave(router, run, ok=False, result=None, error=template_failure(router, step, exc),
              route=None)
        return True
    if rule.timer is not None:
        set_timer(router, step, run, rule.timer)
    if rule.do == "fail":
        leave(router, run, ok=False, result=None, route=None, error={
            "message": f"case rule at line {rule.line} failed the step on {view['name']}",
            "kind": "case"})
    elif rule.route is not None:
        leave(router, run, ok=True, result=result, error=None, route=rule.route)
    return True


def _first(router: Router, step: Step, run: Run, extra: Mapping[str, object]) -> Rule | None:
    context = router.context(reads=rule_templates(step.listen), args=run.args, extra=extra)
    for rule in step.listen:
        if templating.evaluate_guard(rule.when, context, step=step.name, field="case.when"):
            return rule
    return None


def leave(router: Router, run: Run, *, ok: bool, result: JsonValue, error: dict[str, JsonValue] | None,
          route: str | None) -> None:
    """End the listener's run; its step.done / step.failed goes out for watchers (the router
    ignores it when it comes back: the run is gone).
    """
    etype = "step.done" if ok else "step.failed"
    router.state.timers.pop(run.run_id, None)  # its timers, if they fire, change nothing
    router.emit(etype, ids.event_msg_id(router.state.execution_id, etype, run.run_id),
                step=run.step, step_run_id=run.run_id, status="ok" if ok else "error",
                result=result, error=error)
    router.finish_run(run, ok=ok, result=result, error=error, route=route)


def set_timer(router: Router, step: Step, run: Run, timer: TimerSpec) -> None:
    """Ask the runtime for a durable timer; setting the same name again replaces the first."""
    state = router.state
    fire_at = router.now + timer.after_s
    body = {"event_type": "timer.fired", "execution_id": state.execution_id, "step": step.name,
            "step_run_id": run.run_id, "timer_id": timer.name, "fire_at": fire_at,
            "set_at": router.now,
            "data": {"timer_id": timer.name, "name": timer.name, "step": step.name}}
    msg_id = ids.event_msg_id(state.execution_id, "timer", run.run_id, timer.name, state.applied)
    state.timers.setdefault(run.run_id, {})[timer.name] = fire_at
    router.send(Outgoing("timer", msg_id, body, event_type="timer.fired"))


def _timer_fired(router: Router, event: TimerFired) -> None:
    """Forget a listener's timer once it fired (a reset one waits for its latest `fire_at`)."""
    run_id = str(event.step_run_id)
    timers = router.state.timers.get(run_id, {})
    name = event.timer_id
    if name in timers and timers[name] == event.fire_at:
        del timers[name]
        if not timers:
            del router.state.timers[run_id]
