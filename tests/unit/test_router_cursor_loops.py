"""Cursor loops in the router: `max_in_flight` claiming slots, refilled after each claimed item,
retired when a claim finds nothing; and a templated `max_in_flight` rendered when a loop starts.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from unit_helpers import parse

from noetl_stream.dsl import Playbook
from noetl_stream.router.explain import explain
from noetl_stream.testing import Reply, RouterHarness
from noetl_stream.testing.router_harness import outcome_event

CLAIM = ("UPDATE queue SET status = 'claimed' WHERE id IN (SELECT id FROM queue "
         "WHERE batch = {{ ctx.batch }} AND status = 'pending' FOR UPDATE SKIP LOCKED "
         "LIMIT {{ __frame_max_rows | default(1) }}) RETURNING id")


def cursor_playbook(slots: Any = 3, *, on_failure: bool = False) -> Playbook:
    failure_arc = ("\n              - step: cleanup\n                when: \"{{ error }}\""
                   if on_failure else "")
    return parse(f"""
        workload:
          width: 2
        workflow:
          - step: start
            set: {{ctx.batch: 7}}
            next: drain
          - step: drain
            loop:
              cursor:
                kind: postgres
                auth: pg_local
                claim: "{CLAIM}"
              iterator: job
              spec: {{mode: cursor, max_in_flight: {slots}}}
            tool: {{kind: noop}}
            next:
              - step: after
                when: "{{{{ event.name == 'loop.done' }}}}"
                args: {{count: "{{{{ drain | length }}}}"}}{failure_arc}
          - step: after
          - step: cleanup
    """)


def started(playbook: Playbook) -> RouterHarness:
    harness = RouterHarness(playbook)
    harness.answer(harness.pending[0])  # start
    return harness


def claimed(job: int) -> Reply:
    """The worker claimed row {id: job} and its tasks returned it."""
    return Reply(result={"id": job})


EXHAUSTED = Reply(exhausted=True)


def test_router_cursor_loop_issues_one_claiming_command_per_slot() -> None:
    harness = started(cursor_playbook(3))
    commands = harness.pending_for("drain")
    assert [c["iteration"] for c in commands] == [0, 1, 2]
    for command in commands:
        assert command["cursor"] == {"kind": "postgres", "claim": CLAIM, "auth": "pg_local",
                                     "connection": None, "iterator": "job"}
        # The worker binds `iter.job` to the row it claims; the router knows only the number.
        assert command["context"]["iter"] == {"_index": command["iteration"]}
        assert command["context"]["ctx"] == {"batch": 7}  # the claim reads ctx.batch
    (loop_started,) = harness.events_of("loop.started")
    assert (loop_started["total"], loop_started["max_in_flight"]) == (None, 3)


def test_router_cursor_slot_is_refilled_after_an_item_and_retired_when_exhausted() -> None:
    harness = started(cursor_playbook(2))
    first, second = harness.pending_for("drain")
    harness.answer(first, claimed(10))
    assert [c["iteration"] for c in harness.pending_for("drain")] == [1, 2]
    harness.answer(second, EXHAUSTED)
    assert [c["iteration"] for c in harness.pending_for("drain")] == [2]  # slot 2 not refilled
    (third,) = harness.pending_for("drain")
    harness.answer(third, claimed(11))
    (fourth,) = harness.pending_for("drain")
    assert fourth["iteration"] == 3
    assert harness.state.steps["drain"].status == "running"
    harness.answer(fourth, EXHAUSTED)
    assert harness.pending_for("drain") == []
    assert harness.state.steps["drain"].status == "completed"
    assert harness.state.steps["drain"].result == [{"id": 10}, {"id": 11}]
    assert harness.fired_steps() == ["start", "drain", "after"]
    (after,) = harness.commands_for("after")
    assert after["context"]["args"] == {"count": 2}


def test_router_cursor_loop_keeps_results_in_iteration_order_when_answered_out_of_order() -> None:
    harness = started(cursor_playbook(3))
    for command, job in zip(reversed(harness.pending_for("drain")), (3, 2, 1), strict=True):
        harness.answer(command, claimed(job))
    harness.run(lambda c: EXHAUSTED)
    assert harness.state.steps["drain"].result == [{"id": 1}, {"id": 2}, {"id": 3}]
    assert harness.state.status == "completed"


def test_router_cursor_loop_whose_claims_all_come_back_empty_gives_an_empty_result() -> None:
    harness = started(cursor_playbook(4))
    harness.run(lambda c: EXHAUSTED if c["step"] == "drain" else Reply())
    assert len(harness.commands_for("drain")) == 4
    assert harness.state.steps["drain"].result == []
    assert harness.state.status == "completed"
    assert harness.events_of("loop.done")[0]["status"] == "ok"
    progress = harness.events_of("loop.progress")
    assert [(p["done"], p["total"], p.get("exhausted")) for p in progress] == [(0, None, True)] * 4


def test_router_cursor_loop_ends_only_when_every_slot_is_exhausted_and_none_in_flight() -> None:
    harness = started(cursor_playbook(3))
    a, b, c = harness.pending_for("drain")
    harness.answer(a, EXHAUSTED)
    harness.answer(b, EXHAUSTED)
    assert harness.state.steps["drain"].status == "running"  # c still holds a claimed item
    harness.answer(c, claimed(5))
    (refill,) = harness.pending_for("drain")  # c's slot keeps claiming until it finds nothing
    harness.answer(refill, EXHAUSTED)
    assert harness.state.steps["drain"].result == [{"id": 5}]


def test_router_cursor_loop_ignores_a_redelivered_outcome() -> None:
    harness = started(cursor_playbook(1))
    (command,) = harness.pending_for("drain")
    event = outcome_event(command, claimed(1))
    harness.send(copy.deepcopy(event))
    commands_before = len(harness.commands)
    harness.send(copy.deepcopy(event))  # the worker died after publishing, before its ack
    assert len(harness.commands) == commands_before
    assert harness.events_of("loop.progress")[-1]["done"] == 1
    harness.pending = [c for c in harness.pending if c is not command]
    harness.run(lambda c: EXHAUSTED)
    assert harness.state.steps["drain"].result == [{"id": 1}]


def test_router_failed_item_stops_claiming_and_fails_the_execution_naming_the_step() -> None:
    harness = started(cursor_playbook(2))
    first, second = harness.pending_for("drain")
    harness.answer(first, Reply(ok=False, error={"message": "save failed", "kind": "task"}))
    assert harness.pending_for("drain") == [second]  # no new claims after a failure
    assert harness.state.status == "running"  # the item in flight still finishes
    harness.answer(second, claimed(2))
    assert harness.pending_for("drain") == []
    assert harness.state.status == "failed"
    assert harness.state.error is not None
    assert harness.state.error["step"] == "drain"
    assert harness.state.error["iteration"] == 0
    assert harness.state.error["message"] == 'step "drain" failed: save failed'
    assert harness.events_of("loop.failed")[0]["step"] == "drain"
    assert "after" not in harness.fired_steps()


def test_router_failed_item_taken_by_a_failure_arc_does_not_fail_the_execution() -> None:
    harness = started(cursor_playbook(1, on_failure=True))
    (command,) = harness.pending_for("drain")
    harness.answer(command, Reply(ok=False, error={"message": "save failed"}))
    harness.run()
    assert harness.fired_steps() == ["start", "drain", "cleanup"]
    assert harness.state.status == "completed"
    assert harness.state.steps["drain"].status == "failed"


def test_router_cursor_loop_issues_the_same_commands_on_replay() -> None:
    def drive() -> list[Any]:
        harness = started(cursor_playbook(2))
        replies = iter([claimed(1), EXHAUSTED, claimed(2), EXHAUSTED])
        harness.run(lambda c: next(replies) if c["step"] == "drain" else Reply())
        return [harness.commands, [(o.msg_id, o.body) for o in harness.events]]

    assert drive() == drive()


def test_router_cursor_loop_status_shows_slots_and_exhausted_ones() -> None:
    playbook = cursor_playbook(2)
    harness = started(playbook)
    harness.answer(harness.pending_for("drain")[0], EXHAUSTED)
    (running,) = explain(harness.state, now=harness.now, playbook=playbook)["running"]
    assert running["iterations"]["slots"] == 2
    assert running["iterations"]["exhausted"] == 1
    assert running["iterations"]["total"] is None
    assert [i["index"] for i in running["iterations"]["in_flight"]] == [1]


# -- templated max_in_flight ------------------------------------------------------------------

def parallel_playbook(limit: str, workload: str = "width: 2") -> Playbook:
    return parse(f"""
        workload:
          {workload}
        workflow:
          - step: each
            loop:
              in: [1, 2, 3, 4, 5]
              iterator: x
              spec: {{mode: parallel, max_in_flight: "{limit}"}}
            tool: {{kind: noop}}
    """)


def test_router_renders_a_templated_max_in_flight_when_the_loop_starts() -> None:
    harness = RouterHarness(parallel_playbook("{{ workload.width }}"))
    assert [c["iteration"] for c in harness.pending_for("each")] == [0, 1]
    harness.run(lambda c: Reply(result=c["context"]["iter"]["x"]))
    assert harness.state.steps["each"].result == [1, 2, 3, 4, 5]


def test_router_templated_max_in_flight_reads_the_args_of_the_token() -> None:
    playbook = parse("""
        workflow:
          - step: start
            next:
              - step: drain
                args: {slots: 3}
          - step: drain
            loop:
              cursor: {auth: pg, claim: "DELETE FROM q WHERE id = (SELECT min(id) FROM q) RETURNING id"}
              iterator: job
              spec: {max_in_flight: "{{ args.slots }}"}
            tool: {kind: noop}
    """)
    harness = started(playbook)
    assert len(harness.pending_for("drain")) == 3


@pytest.mark.parametrize(("workload", "shown"), [("width: 0", "0"), ("width: many", "'many'"),
                                                 ("width: -1", "-1"), ("other: 1", "None")])
def test_router_templated_max_in_flight_that_is_not_a_positive_whole_number_fails_the_step(
        workload: str, shown: str) -> None:
    harness = RouterHarness(parallel_playbook("{{ workload.width }}", workload))
    assert harness.commands == []
    assert harness.state.status == "failed"
    assert harness.state.error is not None
    assert harness.state.error["step"] == "each"
    assert harness.state.error["field"] == "loop.spec.max_in_flight"
    assert harness.state.error["message"] == (
        'step "each" failed: step "each" field "loop.spec.max_in_flight": '
        f"'{{{{ workload.width }}}}' gave {shown}, not a positive whole number")


def test_router_templated_max_in_flight_of_a_cursor_loop_sets_its_slots() -> None:
    harness = started(cursor_playbook('"{{ workload.width }}"'))
    assert [c["iteration"] for c in harness.pending_for("drain")] == [0, 1]


def test_router_sequential_loop_ignores_max_in_flight() -> None:
    playbook = parse("""
        workflow:
          - step: each
            loop:
              in: [1, 2]
              iterator: x
              spec: {mode: sequential, max_in_flight: "{{ workload.missing }}"}
            tool: {kind: noop}
    """)
    harness = RouterHarness(playbook)
    assert len(harness.pending_for("each")) == 1
