"""Cancellation in the pure router: `execution.cancel.requested` cuts every running run short
(`step.cancelled`, naming in-flight loop iterations), drops delayed tokens and joins, and ends the
execution with `execution.cancelled`; later outcomes and repeated cancels change nothing."""

from __future__ import annotations

from typing import Any

from unit_helpers import parse

from noetl_stream.jsonutil import to_plain
from noetl_stream.router import ExecutionState, apply, start
from noetl_stream.router_events import router_event
from noetl_stream.testing.router_harness import Reply, RouterHarness

PARALLEL = parse("""
    workload: {items: [1, 2, 3, 4]}
    workflow:
      - step: start
        tool: {kind: noop}
        next:
          spec: {mode: inclusive}
          arcs:
            - step: slow
            - step: fan
            - step: later
            - step: quick
      - step: slow
        tool: {kind: python, code: "result = 1"}
        next: join
      - step: fan
        loop:
          in: "{{ workload.items }}"
          iterator: item
          spec: {mode: parallel, max_in_flight: 2}
        tool: {kind: noop}
        next: join
      - step: later
        tool: {kind: noop}
        next: {to: [{step: join}], spec: {delay: 60}}
      - step: quick
        tool: {kind: noop}
        next: join
      - step: join
        tool: {kind: noop}
""")


def cancel_event(reason: str = "stop it") -> dict[str, Any]:
    return {"event_type": "execution.cancel.requested", "execution_id": "exec1",
            "reason": reason, "requested_by": "test"}


def started(harness: RouterHarness) -> RouterHarness:
    """Answer `start`, `later` and `quick`: `slow` and two `fan` iterations stay in flight,
    `later`'s token waits behind its delay and `join` waits for its other branches."""
    harness.run(lambda c: Reply() if c["step"] in ("start", "later", "quick") else None)
    assert harness.state.delayed and harness.state.joins
    return harness


def test_router_cancel_cuts_running_runs_and_iterations_short_and_ends_cancelled() -> None:
    harness = started(RouterHarness(PARALLEL))
    harness.send(cancel_event())
    state = harness.state
    assert state.status == "cancelled"
    cancelled = {e["step"]: e for e in harness.events_of("step.cancelled")}
    assert set(cancelled) == {"slow", "fan"}
    assert cancelled["fan"]["iterations"] == [0, 1]
    assert cancelled["slow"]["reason"] == "stop it"
    assert state.steps["slow"].status == "cancelled"
    assert state.steps["fan"].status == "cancelled"
    assert state.steps["start"].status == "completed"
    assert state.runs == {} and state.joins == {} and state.delayed == {}
    assert harness.event_types()[-1] == "execution.cancelled"
    final = harness.events_of("execution.cancelled")[0]
    assert final["status"] == "cancelled"
    assert final["error"]["reason"] == "stop it"
    assert final["steps"]["fan"]["status"] == "cancelled"


def test_router_cancelled_execution_has_no_result_but_finished_steps_keep_theirs() -> None:
    harness = RouterHarness(PARALLEL)
    harness.run(lambda c: Reply(result={"step": c["step"]}) if c["step"] in ("start", "quick")
                else None)
    assert harness.state.result == {"step": "quick"}  # the last step that finished, so far

    harness.send(cancel_event())

    final = harness.events_of("execution.cancelled")[0]
    assert final["result"] is None and harness.state.summary()["result"] is None
    assert final["steps"]["quick"]["result"] == {"step": "quick"}


def test_router_cancel_issues_no_new_commands_and_ignores_late_outcomes() -> None:
    harness = started(RouterHarness(PARALLEL))
    commands = len(harness.commands)
    harness.send(cancel_event())
    events = len(harness.events)
    harness.run()  # every command still pending answers after all
    assert len(harness.commands) == commands
    assert len(harness.events) == events
    assert harness.state.status == "cancelled"
    assert harness.state.steps["slow"].status == "cancelled"


def test_router_cancel_after_completion_is_a_no_op() -> None:
    harness = RouterHarness(PARALLEL)
    harness.run(lambda c: Reply())
    timer = harness.timers()[0]
    harness.fire_timer(timer)
    harness.run()
    assert harness.state.status == "completed"
    before = to_plain(harness.state.to_dict())
    assert harness.send(cancel_event()) == []
    assert to_plain(harness.state.to_dict())["status"] == before["status"] == "completed"


def test_router_a_second_cancel_changes_nothing() -> None:
    harness = started(RouterHarness(PARALLEL))
    harness.send(cancel_event())
    assert harness.send(cancel_event("again")) == []
    assert len(harness.events_of("execution.cancelled")) == 1


def test_router_cancel_replays_the_same() -> None:
    harness = started(RouterHarness(PARALLEL))
    harness.send(cancel_event())
    harness.run()
    events = harness.applied

    def replay(through_json: bool) -> tuple[list[Any], dict[str, Any]]:
        state = start(PARALLEL, execution_id="exec1", playbook_key=PARALLEL.name,
                      workload=dict(PARALLEL.workload), now=0.0)
        outboxes = [to_plain(state.to_dict()["outbox"])]
        for now, event in enumerate(events, start=1):
            if through_json:
                state = ExecutionState.from_dict(to_plain(state.to_dict()))
            state = apply(PARALLEL, state, router_event(event), float(now)).state
            outboxes.append(to_plain(state.to_dict()["outbox"]))
        return outboxes, to_plain(state.to_dict())

    assert replay(False) == replay(True)


def test_router_cancel_of_a_listener_ends_its_wait() -> None:
    pb = parse("""
        workflow:
          - step: start
            next: wait
          - step: wait
            eval_mode: on_event
            case:
              - when: "{{ event.name == 'signal.go' }}"
                then: {next: [done]}
          - step: done
            tool: {kind: noop}
    """)
    harness = RouterHarness(pb)
    harness.run()
    assert harness.state.status == "running"
    harness.send(cancel_event())
    assert harness.state.status == "cancelled"
    assert [e["step"] for e in harness.events_of("step.cancelled")] == ["wait"]
    assert harness.signal("go") == []
