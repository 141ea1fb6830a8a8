"""Delayed transitions (spec 001 §2.4 `next.spec.delay`): the token waits in the router state
behind a durable timer and reaches its step when `timer.fired` comes back."""

from __future__ import annotations

from unit_helpers import parse

from noetl_stream.router import ExecutionState
from noetl_stream.testing.router_harness import Reply, RouterHarness

DELAYED = """
    workflow:
      - step: start
        tool: {kind: noop}
        next: {to: [{step: later, args: {n: 7}}], spec: {delay: 30s}}
      - step: later
        tool: {kind: noop, input: {n: "{{ args.n }}"}}
"""


def test_a_delayed_arc_compiles_to_seconds() -> None:
    pb = parse(DELAYED)
    (arc,) = pb.step("start").next.arcs
    assert (arc.step, arc.delay) == ("later", 30.0)
    case = parse("""
        workflow:
          - step: start
            case:
              - when: "{{ true }}"
                then:
                  - next: {to: [a], spec: {delay: 500ms}}
          - step: a
    """)
    assert [a.delay for a in case.step("start").next.arcs] == [0.5]


def test_a_delayed_token_waits_for_its_timer() -> None:
    harness = RouterHarness(parse(DELAYED), now=100.0)
    harness.run()
    state = harness.state
    assert harness.fired_steps() == ["start"]
    assert state.status == "running"  # the pending token keeps the execution alive
    (timer,) = harness.timers()
    assert timer.body["fire_at"] == timer.body["set_at"] + 30.0
    assert timer.msg_id == "evt:exec1:timer:next.1"
    (pending,) = state.delayed.values()
    assert (pending.src, pending.dst, pending.args) == ("start", "later", {"n": 7})
    assert "execution.completed" not in harness.event_types()

    harness.fire_timer(timer)
    assert harness.fired_steps() == ["start", "later"]
    assert harness.state.delayed == {}
    assert harness.pending_for("later")[0]["context"]["args"] == {"n": 7}
    harness.run()
    assert harness.state.status == "completed"


def test_a_redelivered_timer_delivers_the_token_once() -> None:
    harness = RouterHarness(parse(DELAYED))
    harness.run()
    (timer,) = harness.timers()
    harness.fire_timer(timer)
    harness.fire_timer(timer)
    assert harness.fired_steps() == ["start", "later"]
    assert "event.ignored" not in harness.event_types()


def test_the_pending_token_survives_a_state_round_trip() -> None:
    harness = RouterHarness(parse(DELAYED))
    harness.run()
    (timer,) = harness.timers()
    # A restart: the router reloads its snapshot from KV.
    harness.state = ExecutionState.from_dict(harness.state.to_dict())
    assert list(harness.state.delayed) == ["next.1"]
    harness.fire_timer(timer)
    harness.run()
    assert harness.fired_steps() == ["start", "later"]
    assert harness.state.status == "completed"


def test_a_join_waits_for_a_delayed_token() -> None:
    harness = RouterHarness(parse("""
        workflow:
          - step: start
            tool: {kind: noop}
            next: [fast, slow]
          - step: fast
            tool: {kind: noop}
            next: [both]
          - step: slow
            tool: {kind: noop}
            next: {to: [both], spec: {delay: 5}}
          - step: both
            tool: {kind: noop}
    """))
    harness.run()
    assert "both" not in harness.fired_steps()
    assert "both" in harness.state.joins and harness.state.status == "running"
    (timer,) = harness.timers()
    harness.fire_timer(timer)
    harness.run()
    assert harness.fired_steps().count("both") == 1
    assert harness.state.status == "completed"


def test_a_delayed_case_route_waits_too() -> None:
    harness = RouterHarness(parse("""
        workflow:
          - step: start
            tool: {kind: noop}
            case:
              - when: "{{ true }}"
                then:
                  - next: {to: [a], spec: {delay: 2s}}
          - step: a
            tool: {kind: noop}
    """))
    command = harness.pending[0]
    harness.send({"event_type": "step.done", "execution_id": "exec1", "step": "start",
                  "step_run_id": command["step_run_id"], "iteration": None, "result": None,
                  "route": "case[0]", "pool": "default", "status": "ok"})
    harness.pending.clear()
    assert harness.state.status == "running" and harness.fired_steps() == ["start"]
    (timer,) = harness.timers()
    assert timer.body["fire_at"] - timer.body["set_at"] == 2.0
    harness.fire_timer(timer)
    harness.run()
    assert harness.fired_steps() == ["start", "a"]
    assert harness.state.status == "completed"


def test_a_failed_execution_drops_its_pending_tokens() -> None:
    harness = RouterHarness(parse("""
        workflow:
          - step: start
            tool: {kind: noop}
            next: [boom, wait]
          - step: boom
            tool: {kind: noop}
          - step: wait
            tool: {kind: noop}
            next: {to: [later], spec: {delay: 60}}
          - step: later
            tool: {kind: noop}
    """))
    harness.answer(harness.pending[0])
    harness.answer(harness.pending_for("wait")[0])
    assert harness.state.delayed
    harness.answer(harness.pending_for("boom")[0], Reply(ok=False))
    assert harness.state.status == "failed" and harness.state.delayed == {}
    (timer,) = harness.timers()
    assert harness.fire_timer(timer) == []
