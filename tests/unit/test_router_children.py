"""Child executions in the pure router: `child.started` is recorded on the run or iteration in
flight; a cancel of the parent, a failure that ends it, or the watchdog cutting a command short
asks for that command's children to be cancelled (outbox kind `cancel`); a child that starts
after its command was given up is cancelled at once; detached (`async: true`) children are left
alone; children that end with their command leave no trace; decisions replay the same."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from unit_helpers import parse

from noetl_stream.jsonutil import to_plain
from noetl_stream.messages import CancelRequest
from noetl_stream.router import ExecutionState, apply, start
from noetl_stream.router.explain import explain
from noetl_stream.router_events import router_event
from noetl_stream.testing.router_harness import Reply, RouterHarness

WAITS = parse("""
    workflow:
      - step: start
        tool: {kind: playbook, path: child}
        next:
          - step: done
          - step: rescue
            when: "{{ event.name == 'step.failed' }}"
      - step: done
        tool: {kind: noop}
      - step: rescue
        tool: {kind: noop}
""")

GUARDED = parse("""
    workflow:
      - step: start
        spec: {timeout: 5}
        tool: {kind: playbook, path: child}
        next:
          - step: done
          - step: rescue
            when: "{{ event.name == 'step.failed' }}"
      - step: done
        tool: {kind: noop}
      - step: rescue
        tool: {kind: noop}
""")

LOOP = parse("""
    workload: {items: [a, b, c]}
    workflow:
      - step: start
        loop:
          in: "{{ workload.items }}"
          iterator: item
          spec: {mode: parallel, max_in_flight: 2, timeout: 3}
        tool: {kind: playbook, path: child}
""")

PARALLEL = parse("""
    workflow:
      - step: start
        tool: {kind: noop}
        next:
          spec: {mode: inclusive}
          arcs:
            - step: wait
            - step: breaks
      - step: wait
        tool: {kind: playbook, path: child}
      - step: breaks
        tool: {kind: python, code: "raise ValueError('x')"}
""")


def cancel_event() -> dict[str, Any]:
    return {"event_type": "execution.cancel.requested", "execution_id": "exec1",
            "reason": "stop it", "requested_by": "test"}


def watchdog_timers(harness: RouterHarness) -> list[Any]:
    return [t for t in harness.timers() if str(t.body["timer_id"]).startswith("watchdog.")]


def test_router_records_a_child_on_the_run_that_waits_for_it() -> None:
    harness = RouterHarness(WAITS)
    (command,) = harness.pending
    assert harness.child_started(command, "exec1xchild") == []
    run = harness.state.runs[command["step_run_id"]]
    assert run.children == {"-": ["exec1xchild"]}
    harness.child_started(command, "exec1xchild")  # a repeat records nothing new
    assert run.children == {"-": ["exec1xchild"]}
    assert harness.cancelled_children() == []
    (waiting,) = explain(harness.state, harness.playbook, now=0.0)["running"]
    assert waiting["children"] == ["exec1xchild"]  # `noetl-stream status` names it


def test_router_cancel_asks_to_cancel_the_children_of_running_runs() -> None:
    harness = RouterHarness(WAITS)
    (command,) = harness.pending
    harness.child_started(command, "exec1xchild")
    outbox = harness.send(cancel_event())
    (request,) = [o for o in outbox if o.kind == "cancel"]
    assert request.msg_id == "cancel:exec1xchild"
    body = CancelRequest.model_validate(request.body)  # what the server's cancel handler reads
    assert body.execution_id == "exec1xchild"
    assert body.requested_by == "execution exec1"
    assert body.reason is not None and "stop it" in body.reason
    assert harness.state.status == "cancelled"
    assert harness.event_types()[-1] == "execution.cancelled"


def test_router_watchdog_timeout_of_a_playbook_step_cancels_its_child() -> None:
    harness = RouterHarness(GUARDED)
    (command,) = harness.pending
    harness.child_started(command, "exec1xchild")
    (timer,) = watchdog_timers(harness)
    harness.fire_timer(timer)
    assert harness.cancelled_children() == ["exec1xchild"]
    (request,) = harness.cancels
    assert "timed out" in request.body["reason"]
    assert harness.fired_steps() == ["start", "rescue"]
    harness.run()
    assert harness.state.status == "completed"
    assert harness.cancelled_children() == ["exec1xchild"]  # asked once


def test_router_watchdog_timeout_of_one_iteration_cancels_only_its_children() -> None:
    harness = RouterHarness(LOOP)
    zero, one = harness.pending
    harness.child_started(zero, "exec1xzero")
    harness.child_started(one, "exec1xone")
    run = harness.state.runs[zero["step_run_id"]]
    assert run.children == {"0": ["exec1xzero"], "1": ["exec1xone"]}
    first, second = watchdog_timers(harness)
    harness.fire_timer(second)
    assert harness.cancelled_children() == ["exec1xone"]
    assert run.children == {"0": ["exec1xzero"]}
    harness.answer(zero)  # iteration 0's child ended with it: nothing left to cancel
    assert run.children == {}
    harness.fire_timer(first)
    assert harness.cancelled_children() == ["exec1xone"]


def test_router_a_child_started_after_the_cancel_is_cancelled_at_once() -> None:
    harness = RouterHarness(WAITS)
    (command,) = harness.pending
    harness.send(cancel_event())
    assert harness.cancelled_children() == []
    outbox = harness.child_started(command, "exec1xlate")
    assert [(o.kind, o.msg_id) for o in outbox] == [("cancel", "cancel:exec1xlate")]
    assert harness.state.status == "cancelled"


def test_router_a_child_started_after_its_command_timed_out_is_cancelled_at_once() -> None:
    harness = RouterHarness(GUARDED)
    (command,) = harness.pending
    (timer,) = watchdog_timers(harness)
    harness.fire_timer(timer)
    assert harness.state.status == "running"  # `rescue` runs
    harness.child_started(command, "exec1xlate")
    assert harness.cancelled_children() == ["exec1xlate"]


def test_router_a_failure_elsewhere_that_ends_the_execution_cancels_waiting_children() -> None:
    harness = RouterHarness(PARALLEL)
    harness.run(lambda c: Reply() if c["step"] == "start" else None)
    harness.child_started(harness.pending_for("wait")[0], "exec1xchild")
    harness.answer(harness.pending_for("breaks")[0], Reply(ok=False))
    assert harness.state.status == "failed"
    assert harness.cancelled_children() == ["exec1xchild"]
    assert harness.event_types()[-1] == "execution.failed"


def test_router_leaves_detached_children_alone() -> None:
    harness = RouterHarness(WAITS)
    (command,) = harness.pending
    harness.child_started(command, "exec1xasync", detached=True)
    assert harness.state.runs[command["step_run_id"]].children == {}
    harness.answer(command)  # the step finishes before its fire-and-forget child does
    harness.child_started(command, "exec1xasync2", detached=True)
    harness.send(cancel_event())
    assert harness.cancelled_children() == []


def test_router_children_that_end_with_their_run_are_dropped() -> None:
    harness = RouterHarness(WAITS)
    (command,) = harness.pending
    harness.child_started(command, "exec1xchild")
    harness.answer(command)
    assert all(run.children == {} for run in harness.state.runs.values())
    harness.run()
    assert harness.state.status == "completed"
    assert harness.cancelled_children() == []


def test_router_child_decisions_replay_the_same() -> None:
    harness = RouterHarness(LOOP)
    zero, one = harness.pending
    harness.child_started(zero, "exec1xzero")
    harness.child_started(one, "exec1xone")
    harness.fire_timer(watchdog_timers(harness)[1])
    harness.send(cancel_event())
    harness.child_started(zero, "exec1xlate")
    assert harness.cancelled_children() == ["exec1xone", "exec1xzero", "exec1xlate"]
    assert replay(LOOP, harness.applied, through_json=True) == replay(
        LOOP, harness.applied, through_json=False)


def replay(playbook: Any, events: list[dict[str, Any]],
           *, through_json: bool) -> tuple[list[Any], dict[str, Any]]:
    state = start(playbook, execution_id="exec1", playbook_key=playbook.name,
                  workload=dict(playbook.workload), now=0.0)
    outboxes = [to_plain(state.to_dict()["outbox"])]
    for now, event in enumerate(events, start=1):
        if through_json:
            state = ExecutionState.from_dict(to_plain(state.to_dict()))
        state = apply(playbook, state, router_event(event), float(now)).state
        outboxes.append(to_plain(state.to_dict()["outbox"]))
    return outboxes, to_plain(state.to_dict())


@settings(max_examples=60, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_router_never_leaves_a_waited_on_child_of_a_cut_command_uncancelled(
        data: st.DataObject) -> None:
    """Whatever the order of outcomes, child starts, watchdog timers and a cancel: every child
    whose command ended without an outcome of its own is asked to stop, and replays agree."""
    harness = RouterHarness(LOOP)
    children: dict[str, dict[str, Any]] = {}  # child id -> the command that started it
    answered: set[str] = set()  # children whose command reported an outcome
    fired: set[str] = set()
    while len(harness.applied) < 60:
        choice = data.draw(st.sampled_from(["answer", "child", "timer", "cancel"]))
        timers = [t for t in watchdog_timers(harness) if t.msg_id not in fired]
        if choice == "answer" and harness.pending:
            command = data.draw(st.sampled_from(harness.pending))
            harness.answer(command, Reply(ok=data.draw(st.booleans())))
            answered |= {c for c, cmd in children.items() if cmd is command}
        elif choice == "child" and harness.commands:
            command = data.draw(st.sampled_from(harness.commands))
            child = f"exec1xc{len(children)}"
            children[child] = command
            harness.child_started(command, child)
        elif choice == "timer" and timers:
            timer = data.draw(st.sampled_from(timers))
            fired.add(timer.msg_id)
            harness.fire_timer(timer)
        elif choice == "cancel" and data.draw(st.integers(0, 5)) == 0:
            harness.send(cancel_event())
        elif harness.state.status != "running" or not (harness.pending or timers):
            break
    still_waited = {c for run in harness.state.runs.values() for cs in run.children.values()
                    for c in cs}
    cancelled = set(harness.cancelled_children())
    for child in children:
        if child in answered and child not in cancelled:
            continue  # its command reported an outcome: the task saw the child's end
        assert child in cancelled or child in still_waited
    if harness.state.status != "running":
        assert still_waited == set()
    assert replay(LOOP, harness.applied, through_json=True) == replay(
        LOOP, harness.applied, through_json=False)
