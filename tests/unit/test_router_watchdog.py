"""The watchdog (ARCHITECTURE §6.4): a step with `spec.timeout` gets a durable timer per command;
when it fires before the outcome, the run or iteration fails with kind `timeout` and is routed
like any failure, and an outcome that comes later changes nothing."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from unit_helpers import parse

from noetl_stream.jsonutil import to_plain
from noetl_stream.router import ExecutionState, apply, start
from noetl_stream.router.budgets import GRACE_S, budget_s
from noetl_stream.router_events import router_event
from noetl_stream.testing.router_harness import Reply, RouterHarness

GUARDED = parse("""
    workflow:
      - step: start
        spec: {timeout: 5}
        tool: {kind: python, code: "result = 1"}
        next:
          - step: done
          - step: rescue
            when: "{{ event.name == 'step.failed' and error.kind == 'timeout' }}"
      - step: done
        tool: {kind: noop}
      - step: rescue
        tool: {kind: noop}
""")

UNGUARDED = parse("""
    workflow:
      - step: start
        tool: {kind: python, code: "result = 1"}
""")

LOOP = parse("""
    workload: {items: [a, b, c]}
    workflow:
      - step: start
        loop:
          in: "{{ workload.items }}"
          iterator: item
          spec: {mode: parallel, max_in_flight: 2, timeout: 3}
        tool: {kind: python, code: "result = 1"}
""")


def watchdog_timers(harness: RouterHarness) -> list[Any]:
    return [t for t in harness.timers() if str(t.body["timer_id"]).startswith("watchdog.")]


def test_router_sets_a_watchdog_timer_for_a_step_with_a_timeout() -> None:
    harness = RouterHarness(GUARDED, now=100.0)
    (timer,) = watchdog_timers(harness)
    assert timer.body["fire_at"] == 100.0 + 5 + GRACE_S
    assert timer.body["step_run_id"] == harness.pending[0]["step_run_id"]
    assert timer.body["iteration"] is None
    run = next(iter(harness.state.runs.values()))
    assert (run.issued_at, run.deadline) == (100.0, 105.0 + GRACE_S)


def test_router_sets_no_watchdog_when_only_a_kind_default_bounds_the_task() -> None:
    harness = RouterHarness(UNGUARDED)
    assert watchdog_timers(harness) == []
    assert budget_s(UNGUARDED, UNGUARDED.step("start")) is None


def test_router_watchdog_fails_a_silent_run_by_timeout_and_routes_the_failure() -> None:
    harness = RouterHarness(GUARDED)
    (timer,) = watchdog_timers(harness)
    (late,) = harness.pending
    harness.fire_timer(timer)
    (timeout,) = harness.events_of("step.timeout")
    assert timeout["reason"] == "no outcome within 5s (spec.timeout)"
    assert harness.state.steps["start"].status == "failed"
    assert harness.state.steps["start"].error is not None
    assert harness.state.steps["start"].error["kind"] == "timeout"
    assert harness.fired_steps() == ["start", "rescue"]
    # The worker's outcome arrives after all: the run is over, nothing changes.
    harness.answer(late, Reply(result="too late"))
    assert harness.fired_steps() == ["start", "rescue"]
    harness.run()
    assert harness.state.status == "completed"
    assert harness.state.steps["start"].result is None


def test_router_watchdog_timeout_without_a_failure_arc_fails_the_execution_with_the_reason() -> None:
    pb = parse("""
        workflow:
          - step: start
            spec: {timeout: 1}
            tool: {kind: python, code: "result = 1"}
    """)
    harness = RouterHarness(pb)
    (timer,) = watchdog_timers(harness)
    harness.fire_timer(timer)
    assert harness.state.status == "failed"
    assert harness.state.error is not None
    assert "no outcome within 1s" in harness.state.error["message"]
    assert harness.event_types()[-1] == "execution.failed"


def test_router_watchdog_timer_of_a_finished_run_is_a_no_op() -> None:
    harness = RouterHarness(GUARDED)
    (timer,) = watchdog_timers(harness)
    harness.run()
    assert harness.state.status == "completed"
    applied = harness.state.applied
    outbox = harness.fire_timer(timer)
    assert outbox == [] and harness.state.applied == applied


def test_router_watchdog_timer_after_the_outcome_of_a_running_execution_changes_nothing() -> None:
    pb = parse("""
        workflow:
          - step: start
            spec: {timeout: 1}
            tool: {kind: noop}
            next: wait
          - step: wait
            tool: {kind: noop}
    """)
    harness = RouterHarness(pb)
    (first,) = watchdog_timers(harness)
    harness.answer(harness.pending[0])
    harness.fire_timer(first)
    assert harness.events_of("step.timeout") == []
    assert harness.state.steps["start"].status == "completed"
    assert harness.state.status == "running"


def test_router_watchdog_times_out_one_loop_iteration() -> None:
    harness = RouterHarness(LOOP)
    first, second = watchdog_timers(harness)
    assert (first.body["iteration"], second.body["iteration"]) == (0, 1)
    run = next(iter(harness.state.runs.values()))
    assert run.loop is not None and set(run.loop.deadlines) == {"0", "1"}
    zero = next(c for c in harness.pending if c["iteration"] == 0)
    harness.answer(zero)
    harness.fire_timer(first)  # iteration 0 already answered: a no-op
    assert harness.events_of("step.timeout") == []
    assert run.loop is not None and set(run.loop.deadlines) == {"1", "2"}
    harness.fire_timer(second)
    (timeout,) = harness.events_of("step.timeout")
    assert timeout["iteration"] == 1
    harness.run()  # iteration 2 still answers; the loop fails for iteration 1
    assert harness.state.status == "failed"
    assert harness.state.steps["start"].error is not None
    assert harness.state.steps["start"].error["iteration"] == 1
    assert harness.state.steps["start"].error["kind"] == "timeout"


def test_router_watchdog_budget_counts_a_tasks_own_timeout_and_its_retries() -> None:
    pb = parse("""
        workflow:
          - step: start
            spec: {timeout: 1}
            tool:
              - first:
                  kind: python
                  code: "result = 1"
                  spec:
                    timeout: 10
              - second:
                  kind: python
                  code: "result = 2"
                  spec:
                    policy:
                      rules:
                        - when: "{{ outcome.status == 'error' }}"
                          then: {do: retry, attempts: 3, delay: 2}
    """)
    # 10 s for the first task, 3 calls of 1 s and two waits of 2 s for the second.
    assert budget_s(pb, pb.step("start")) == 10 + 3 * 1 + 2 * 2 + GRACE_S


def test_router_watchdog_decisions_replay_the_same() -> None:
    harness = RouterHarness(LOOP)
    timers = watchdog_timers(harness)
    harness.fire_timer(timers[0])
    harness.run()
    events = harness.applied

    def replay(through_json: bool) -> tuple[list[Any], dict[str, Any]]:
        state = start(LOOP, execution_id="exec1", playbook_key=LOOP.name,
                      workload=dict(LOOP.workload), now=0.0)
        outboxes = [to_plain(state.to_dict()["outbox"])]
        for now, event in enumerate(events, start=1):
            if through_json:
                state = ExecutionState.from_dict(to_plain(state.to_dict()))
            state = apply(LOOP, state, router_event(event), float(now)).state
            outboxes.append(to_plain(state.to_dict()["outbox"]))
        return outboxes, to_plain(state.to_dict())

    assert replay(False) == replay(True) == replay(False)


TIMED_NET = parse("""
    workload: {items: [1, 2, 3]}
    workflow:
      - step: start
        spec: {timeout: 2}
        tool: {kind: noop}
        next:
          spec: {mode: inclusive}
          arcs:
            - step: a
            - step: b
            - step: rescue
              when: "{{ event.name == 'step.failed' }}"
      - step: a
        spec: {timeout: 1}
        tool: {kind: noop}
        next: join
      - step: b
        loop:
          in: "{{ workload.items }}"
          iterator: item
          spec: {mode: parallel, max_in_flight: 2, timeout: 1}
        tool: {kind: noop}
        next: join
      - step: rescue
        tool: {kind: noop}
      - step: join
        tool: {kind: noop}
""")


@settings(max_examples=60, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_router_with_watchdogs_and_cancels_ends_and_replays_the_same(data: st.DataObject) -> None:
    harness = RouterHarness(TIMED_NET)
    fired: set[str] = set()
    while harness.state.status == "running" and len(harness.applied) < 100:
        timers = [t for t in watchdog_timers(harness) if t.msg_id not in fired]
        choice = data.draw(st.sampled_from(["answer", "timer", "cancel"]))
        if choice == "answer" and harness.pending:
            command = data.draw(st.sampled_from(harness.pending))
            harness.answer(command, Reply(ok=data.draw(st.booleans())))
        elif choice == "timer" and timers:
            timer = data.draw(st.sampled_from(timers))
            fired.add(timer.msg_id)
            harness.fire_timer(timer)
        elif choice == "cancel" and data.draw(st.integers(0, 9)) == 0:
            harness.send({"event_type": "execution.cancel.requested", "execution_id": "exec1"})
        elif not harness.pending and not timers:
            break
    if harness.state.status != "running":
        assert harness.event_types()[-1] == f"execution.{harness.state.status}"
        assert harness.state.runs == {} and harness.state.joins == {}
    events = harness.applied

    def replay() -> tuple[list[Any], dict[str, Any]]:
        state = start(TIMED_NET, execution_id="exec1", playbook_key=TIMED_NET.name,
                      workload=dict(TIMED_NET.workload), now=0.0)
        outboxes = []
        for now, event in enumerate(events, start=1):
            state = ExecutionState.from_dict(to_plain(state.to_dict()))
            state = apply(TIMED_NET, state, router_event(event), float(now)).state
            outboxes.append(to_plain(state.to_dict()["outbox"]))
        return outboxes, to_plain(state.to_dict())

    assert replay() == replay()
    assert replay()[1] == to_plain(harness.state.to_dict())
