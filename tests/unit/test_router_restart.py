"""Restart in the pure router: `execution.restart.requested` reopens a failed execution, runs the
failed step (or a named step and everything downstream) again under new run ids while finished
steps keep their results, merges a workload patch, and is refused without change when it cannot
apply."""

from __future__ import annotations

from typing import Any

from unit_helpers import parse

from noetl_stream.testing.router_harness import Command, Reply, RouterHarness

CHAIN = parse("""
    workload: {ok: false}
    workflow:
      - step: start
        tool: {kind: noop}
        next: two
      - step: two
        tool: {kind: noop}
        next: three
      - step: three
        tool: {kind: noop}
        next: four
      - step: four
        tool: {kind: python, input: {ok: "{{ workload.ok }}"}, code: "result = ok"}
        next: five
      - step: five
        tool: {kind: noop}
""")

JOINED = parse("""
    workflow:
      - step: start
        tool: {kind: noop}
        next: [{step: left}, {step: right}]
      - step: left
        tool: {kind: noop}
        next: both
      - step: right
        tool: {kind: noop}
        next: both
      - step: both
        tool: {kind: noop}
""")


def restart(harness: RouterHarness, **fields: Any) -> list[Any]:
    return harness.send({"event_type": "execution.restart.requested",
                         "execution_id": harness.state.execution_id,
                         "restart": harness.state.restarts + 1, **fields})


def fail_four(command: Command) -> Reply:
    if command["step"] == "four" and not command["context"]["workload"]["ok"]:
        return Reply(ok=False, error={"message": "no credential", "kind": "http"})
    return Reply(result=command["step"])


def test_a_failed_step_runs_again_under_a_new_run_id_and_the_others_keep_their_results() -> None:
    h = RouterHarness(CHAIN)
    h.run(fail_four)
    assert h.state.status == "failed"
    before = [c["step_run_id"] for c in h.commands]

    outbox = restart(h, workload={"ok": True}, requested_by="ada")
    h.run(fail_four)

    assert h.state.status == "completed", h.state.error
    again = [c["step_run_id"] for c in h.commands[len(before):]]
    assert again == ["exec1.four.2", "exec1.five.1"]
    assert h.state.steps["start"].runs == 1 and h.state.steps["start"].result == "start"
    assert h.state.workload == {"ok": True}
    (restarted,) = [m for m in outbox if m.event_type == "execution.restarted"]
    assert restarted.body["steps"] == ["four", "five"]
    assert restarted.body["requested_by"] == "ada"
    assert restarted.msg_id == "evt:exec1:execution.restarted:1"
    ends = [m.msg_id for m in h.events if m.event_type.startswith("execution.") and
            m.event_type in ("execution.failed", "execution.completed")]
    assert ends == ["evt:exec1:execution.failed", "evt:exec1:execution.completed:1"]


def test_from_a_step_runs_it_and_everything_downstream_of_a_completed_execution() -> None:
    h = RouterHarness(CHAIN, workload={"ok": True})
    h.run(fail_four)
    assert h.state.status == "completed"
    first = len(h.commands)

    restart(h, from_step="two")
    h.run(fail_four)

    assert h.state.status == "completed"
    assert [c["step"] for c in h.commands[first:]] == ["two", "three", "four", "five"]
    assert h.state.steps["start"].runs == 1
    assert h.state.steps["two"].runs == 2


def test_a_join_waits_only_for_the_branches_that_run_again() -> None:
    h = RouterHarness(JOINED)
    h.run(lambda c: Reply(ok=False) if c["step"] == "right" else Reply(result=c["step"]))
    assert h.state.status == "failed"
    first = len(h.commands)

    restart(h)
    h.run()

    assert h.state.status == "completed"
    assert [c["step"] for c in h.commands[first:]] == ["right", "both"]


def test_restarting_a_completed_execution_without_a_step_or_from_an_unknown_one_changes_nothing() -> None:
    h = RouterHarness(CHAIN, workload={"ok": True})
    h.run(fail_four)
    assert h.state.status == "completed"

    for fields in ({}, {"from_step": "nope"}):
        outbox = restart(h, **fields)
        assert h.state.status == "completed"
        assert [m.event_type for m in outbox] == ["event.ignored"]
    reasons = [m.body["reason"] for m in h.events if m.event_type == "event.ignored"]
    assert "only a failed or cancelled execution restarts without --from STEP" in reasons[0]
    assert reasons[1] == 'the playbook has no step "nope"'
    assert not h.pending


def test_a_running_execution_restarted_from_a_step_ignores_the_old_runs_outcome() -> None:
    h = RouterHarness(CHAIN, workload={"ok": True})
    h.answer(h.pending[0], Reply(result="start"))
    (old,) = h.pending  # two, in flight

    restart(h, from_step="two")
    h.answer(old, Reply(result="late"))  # the cut run's outcome: no longer in flight

    assert [c["step_run_id"] for c in h.pending] == ["exec1.two.2"]
    h.run(fail_four)
    assert h.state.status == "completed"
    assert h.state.steps["two"].result == "two"
    assert h.state.steps["two"].runs == 2


PAGED = parse("""
    workload: {pages: 3}
    workflow:
      - step: start
        tool: {kind: noop}
        next: fetch
      - step: fetch
        tool: {kind: noop}
        next: check
      - step: check
        tool: {kind: noop}
        next:
          - step: fetch
            when: "{{ fetch.more }}"
          - step: done
      - step: done
        tool: {kind: noop}
""")


def test_from_a_step_in_a_cycle_leaves_the_steps_upstream_of_its_back_edge_alone() -> None:
    h = RouterHarness(PAGED)
    h.run(lambda c: Reply(result={"more": False}) if c["step"] == "fetch" else Reply(result=1))
    assert h.state.status == "completed"
    first = len(h.commands)

    outbox = restart(h, from_step="check")
    h.run(lambda c: Reply(result=2))

    (restarted,) = [m for m in outbox if m.event_type == "execution.restarted"]
    assert restarted.body["steps"] == ["check", "done"]
    assert [c["step"] for c in h.commands[first:]] == ["check", "done"]
    assert h.state.steps["fetch"].result == {"more": False}
