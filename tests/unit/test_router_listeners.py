"""`eval_mode: on_event` listeners in the router: they stay active, hear signals, timers and other
steps' outcomes, route or fail on a matching rule, and ignore what no rule matches."""

from __future__ import annotations

import pytest
from unit_helpers import parse

from noetl_stream.errors import PlaybookError
from noetl_stream.router import ExecutionState
from noetl_stream.testing.router_harness import RouterHarness

APPROVAL = """
    workflow:
      - step: start
        tool: {kind: noop}
        next: wait_for_approval
      - step: wait_for_approval
        eval_mode: on_event
        case:
          - when: "{{ event.name == 'step.enter' }}"
            then: {timer: {after: 1h, name: timeout}}
          - when: "{{ event.name == 'signal.approve' }}"
            then:
              set: {ctx: {approved_by: "{{ event.data.user }}"}}
              result: {from: event.data}
              next: [{step: ship, args: {by: "{{ result.user }}"}}]
          - when: "{{ event.name == 'signal.reject' }}"
            then: {fail: true}
          - when: "{{ event.name == 'timer.fired' and event.data.timer_id == 'timeout' }}"
            then: {next: [{step: handle_timeout}]}
      - step: ship
        tool: {kind: noop}
      - step: handle_timeout
        tool: {kind: noop}
"""


def started(body: str = APPROVAL) -> RouterHarness:
    harness = RouterHarness(parse(body))
    harness.run()
    return harness


def test_dsl_compiles_an_on_event_case_into_listen_rules_without_a_tool() -> None:
    step = parse(APPROVAL).step("wait_for_approval")
    assert step.eval_mode == "on_event"
    assert step.tasks == ()
    assert [r.route for r in step.listen] == [None, "case[1]", None, "case[3]"]
    assert step.listen[0].timer is not None and step.listen[0].timer.after_s == 3600
    assert step.listen[2].do == "fail"
    assert {a.step for a in step.next.arcs} == {"ship", "handle_timeout"}


def test_dsl_reads_eval_mode_under_spec_too() -> None:
    pb = parse("""
        workflow:
          - step: wait
            spec: {eval_mode: on_event}
            case:
              - when: "{{ event.name == 'signal.go' }}"
                then: {next: [end]}
    """)
    assert pb.step("wait").eval_mode == "on_event"


@pytest.mark.parametrize(("body", "message"), [
    ("eval_mode: on_event\n    tool: {kind: noop}\n    case: [{when: x, then: {next: [end]}}]",
     "has no `tool`"),
    ("eval_mode: sometimes\n    tool: {kind: noop}", 'eval_mode is one of on_entry, on_event'),
    ("eval_mode: on_event", "needs `case` rules"),
    ("eval_mode: on_event\n    case: [{when: x, then: {call: {url: y}}}]", '"call" does nothing'),
    ("eval_mode: on_event\n    case: [{when: x, then: {timer: {after: soon}}}]", "timer `after`"),
    ("eval_mode: on_event\n    case: [{when: x, then: {timer: {after: 5, name: a.b}}}]",
     "timer `name`"),
])
def test_dsl_rejects_listener_mistakes_with_the_field(body: str, message: str) -> None:
    with pytest.raises(PlaybookError) as err:
        parse(f"workflow:\n  - step: wait\n    {body}\n")
    assert message in str(err.value)


def test_router_keeps_a_listener_active_so_the_execution_keeps_running() -> None:
    harness = started()
    assert harness.state.status == "running"
    assert harness.state.steps["wait_for_approval"].status == "running"
    assert harness.pending == []
    (timer,) = harness.timers()
    assert timer.body["timer_id"] == "timeout" and timer.body["fire_at"] == timer.body["set_at"] + 3600


def test_router_routes_a_listener_on_a_matching_signal_and_completes() -> None:
    harness = started()
    harness.signal("approve", {"user": "ada"})
    assert harness.state.ctx["approved_by"] == "ada"
    (ship,) = harness.pending_for("ship")
    assert ship["context"]["args"] == {"by": "ada"}
    state = harness.run()
    assert state.status == "completed"
    assert state.steps["wait_for_approval"].result == {"user": "ada"}
    assert state.steps["handle_timeout"].status == "skipped"
    assert "step.done" in harness.event_types()


def test_router_fails_the_execution_when_the_listener_rule_fails() -> None:
    harness = started()
    harness.signal("reject", {"user": "bob"})
    assert harness.state.status == "failed"
    assert "signal.reject" in harness.state.error["message"]


def test_router_records_and_ignores_an_unmatched_signal() -> None:
    harness = started()
    harness.signal("maybe", {"x": 1})
    assert harness.state.status == "running"
    (ignored,) = harness.events_of("event.ignored")
    assert ignored["ignored"] == "signal.maybe" and ignored["reason"] == "no listener rule matched"
    harness.signal("approve", {"user": "ada"})
    assert harness.run().status == "completed"


def test_router_ignores_signals_once_the_execution_has_ended() -> None:
    harness = started()
    harness.signal("approve", {"user": "ada"})
    state = harness.run()
    before = ExecutionState.from_dict(state.to_dict())
    assert harness.signal("approve", {"user": "eve"}) == []
    assert harness.state.ctx == before.ctx and harness.state.status == "completed"


def test_router_acts_on_its_timer_firing() -> None:
    harness = started()
    (timer,) = harness.timers()
    harness.fire_timer(timer)
    assert harness.pending_for("handle_timeout")
    assert harness.run().status == "completed"
    assert harness.state.steps["ship"].status == "skipped"


def test_a_listener_remembers_its_timer_until_it_fires() -> None:
    harness = started()
    (timer,) = harness.timers()
    (run,) = [r for r in harness.state.active_runs if r.step == "wait_for_approval"]
    assert harness.state.timers == {run.run_id: {"timeout": timer.body["fire_at"]}}
    stored = ExecutionState.from_dict(harness.state.to_dict())  # kept across a commit
    assert stored.timers == harness.state.timers
    harness.fire_timer(timer)
    assert harness.state.timers == {}


def test_a_listener_that_ends_forgets_its_timers() -> None:
    harness = started()
    harness.signal("approve", {"user": "eve"})
    assert harness.state.timers == {}


def test_router_applies_a_redelivered_signal_once() -> None:
    harness = started("""
        workflow:
          - step: count
            eval_mode: on_event
            case:
              - when: "{{ event.name == 'signal.tick' }}"
                then: {set: {ctx: {ticks: "{{ (ctx.ticks or 0) + 1 }}"}}}
              - when: "{{ event.name == 'signal.stop' }}"
                then: {next: [end]}
    """)
    harness.signal("tick", seq=7)
    harness.signal("tick", seq=7)
    harness.signal("tick", seq=8)
    assert harness.state.ctx["ticks"] == 2
    harness.signal("stop", seq=9)
    assert harness.state.status == "completed"


def test_router_hears_a_signal_that_arrives_after_a_later_one() -> None:
    # Two servers, or a batch that failed and came back: stream order is not arrival order.
    harness = started("""
        workflow:
          - step: count
            eval_mode: on_event
            case:
              - when: "{{ event.name == 'signal.tick' }}"
                then: {set: {ctx: {ticks: "{{ (ctx.ticks or 0) + 1 }}"}}}
    """)
    harness.signal("tick", seq=12)
    harness.signal("tick", seq=10)
    harness.signal("tick", seq=12)  # the redelivered later one still counts once
    assert harness.state.ctx["ticks"] == 2


def test_router_lets_a_listener_hear_other_steps_outcomes() -> None:
    harness = started("""
        workflow:
          - step: start
            tool: {kind: noop}
            next: [work, watch]
          - step: work
            tool: {kind: noop}
          - step: watch
            eval_mode: on_event
            case:
              - when: "{{ event.name == 'step.done' and event.data.step == 'work' }}"
                then: {set: {ctx: {seen: "{{ event.data.step }}"}}, next: [end]}
    """)
    assert harness.state.status == "completed"
    assert harness.state.ctx["seen"] == "work"
    assert harness.events_of("event.ignored") == []
