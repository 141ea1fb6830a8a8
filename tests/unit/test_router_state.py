"""ctx and vars writes, duplicate and late events, completion, and the state snapshot."""

from __future__ import annotations

from typing import Any

import pytest
from unit_helpers import parse

from noetl_stream import jsonutil
from noetl_stream.jsonutil import to_plain
from noetl_stream.messages import Command, Malformed
from noetl_stream.router import ExecutionState, apply
from noetl_stream.router_events import router_event
from noetl_stream.testing import Reply, RouterHarness, outcome_event

WRITES = """
    workload: {base: 10}
    workflow:
      - step: start
        set:
          ctx.total: "{{ result.n + workload.base }}"
          label: "n={{ result.n }}"
        vars:
          record_id: "{{ result.id }}"
        next:
          - step: after
            args: {doubled: "{{ result.n * 2 }}"}
            set: {ctx.routed: true, hops: "{{ (ctx.hops | default(0)) + 1 }}"}
      - step: after
        tool: {kind: python, code: "result = 1", input: {seen: "{{ ctx }}"}}
"""

PARALLEL_PAIR = """
    workflow:
      - step: start
        loop: {in: [1, 2], iterator: x, spec: {mode: parallel}}
"""


def snapshot(state: ExecutionState) -> dict[str, Any]:
    """The state as KV stores it, without the per-event fields (outbox, applied counter)."""
    data = to_plain(state.to_dict())
    data.pop("outbox")
    data.pop("applied")
    return data  # type: ignore[no-any-return]


def test_router_step_set_and_arc_set_write_ctx() -> None:
    harness = RouterHarness(parse(WRITES))
    harness.run(lambda c: Reply(result={"n": 3, "id": "r-1"}) if c["step"] == "start" else Reply())
    assert harness.state.ctx == {"total": 13, "label": "n=3", "routed": True, "hops": 1}
    (after,) = harness.commands_for("after")
    assert after["context"]["args"] == {"doubled": 6}
    assert after["context"]["ctx"] == harness.state.ctx


def test_router_vars_block_extracts_values_on_success() -> None:
    harness = RouterHarness(parse(WRITES))
    harness.run(lambda c: Reply(result={"n": 3, "id": "r-1"}) if c["step"] == "start" else Reply())
    assert harness.state.vars == {"record_id": "r-1"}
    (after,) = harness.commands_for("after")
    assert after["context"]["vars"] == {"record_id": "r-1"}


def test_router_step_set_is_not_applied_on_failure() -> None:
    harness = RouterHarness(parse("""
        workflow:
          - step: start
            set: {ctx.seen: true}
            next:
              - step: after
                when: "{{ event.name == 'step.failed' }}"
          - step: after
    """))
    harness.run(lambda c: Reply(ok=False) if c["step"] == "start" else Reply())
    assert harness.state.ctx == {}
    assert harness.fired_steps() == ["start", "after"]


def test_router_ctx_patch_from_a_successful_outcome_is_merged() -> None:
    harness = RouterHarness(parse("""
        workflow:
          - step: start
            next: after
          - step: after
            tool: {kind: python, code: "result = 1", input: {t: "{{ token }}"}}
    """))
    harness.run(lambda c: Reply(ctx_patch={"token": "abc"}) if c["step"] == "start" else Reply())
    assert harness.state.ctx == {"token": "abc"}
    assert harness.commands_for("after")[0]["context"]["ctx"] == {"token": "abc"}


def test_router_step_results_are_readable_by_name_in_later_steps() -> None:
    harness = RouterHarness(parse("""
        workload: {api_url: "http://api"}
        workflow:
          - step: start
            next:
              - step: after
                when: "{{ start.ready and api_url == 'http://api' }}"
                args: {id: "{{ start.id }}"}
          - step: after
            tool: {kind: python, code: "result = 1", input: {x: "{{ start.id }}"}}
    """))
    harness.run(lambda c: Reply(result={"ready": True, "id": 7}) if c["step"] == "start" else Reply())
    (after,) = harness.commands_for("after")
    assert after["context"]["args"] == {"id": 7}
    assert after["context"]["steps"] == {"start": {"ready": True, "id": 7}}


def test_router_duplicate_outcome_event_is_a_no_op() -> None:
    harness = RouterHarness(parse(WRITES))
    event = outcome_event(harness.pending[0], Reply(result={"n": 1, "id": "x"}))
    assert harness.send(event) != []
    before = snapshot(harness.state)
    assert harness.send(event) == []
    assert snapshot(harness.state) == before
    assert len(harness.commands_for("after")) == 1


def test_router_late_outcome_for_a_finished_run_is_a_no_op() -> None:
    harness = RouterHarness(parse("""
        workflow:
          - step: start
            next: [a, b]
          - step: a
          - step: b
    """))
    harness.answer(harness.pending[0])
    first_a = harness.pending_for("a")[0]
    harness.answer(first_a)
    before = snapshot(harness.state)
    assert harness.send(outcome_event(first_a, Reply(ok=False))) == []
    assert snapshot(harness.state) == before
    assert harness.state.status == "running"


def test_router_duplicate_loop_iteration_event_is_counted_once() -> None:
    harness = RouterHarness(parse("""
        workflow:
          - step: start
            loop: {in: [1, 2, 3], iterator: x, spec: {mode: parallel, max_in_flight: 3}}
    """))
    first = harness.pending[0]
    harness.answer(first, Reply(result="one"))
    before = snapshot(harness.state)
    assert harness.send(outcome_event(first, Reply(result="again"))) == []
    assert snapshot(harness.state) == before
    harness.run(lambda c: Reply(result=c["iteration"]))
    assert harness.state.steps["start"].result == ["one", 1, 2]


def test_router_events_after_the_execution_ended_are_ignored() -> None:
    harness = RouterHarness(parse("""
        workflow:
          - step: start
    """))
    command = harness.pending[0]
    harness.answer(command)
    assert harness.state.status == "completed"
    assert harness.send(outcome_event(command)) == []


def test_router_completion_emits_execution_completed_with_summary() -> None:
    harness = RouterHarness(parse(WRITES), execution_id="e7")
    harness.run(lambda c: Reply(result={"n": 1, "id": "x"}) if c["step"] == "start"
                else Reply(result={"final": True}))
    assert harness.state.status == "completed"
    assert harness.event_types()[-1] == "execution.completed"
    (done,) = harness.events_of("execution.completed")
    assert done["event_id"] == "evt:e7:execution.completed"
    assert done["execution_id"] == "e7"
    assert done["status"] == "completed"
    assert done["result"] == {"final": True}
    assert done["error"] is None
    assert done["steps"] == {
        "start": {"status": "completed", "runs": 1, "result": {"n": 1, "id": "x"}},
        "after": {"status": "completed", "runs": 1, "result": {"final": True}},
    }
    assert done["ctx"] == {"total": 11, "label": "n=1", "routed": True, "hops": 1}
    assert done["vars"] == {"record_id": "x"}
    assert harness.state.runs == {} and harness.state.joins == {}


def test_router_step_without_next_ends_only_its_branch() -> None:
    harness = RouterHarness(parse("""
        workflow:
          - step: start
            next: [short, long]
          - step: short
          - step: long
            next: longer
          - step: longer
    """))
    harness.answer(harness.pending[0])
    harness.answer(harness.pending_for("short")[0])
    assert harness.state.status == "running"
    harness.run()
    assert harness.state.status == "completed"
    assert harness.fired_steps() == ["start", "short", "long", "longer"]


def test_router_state_survives_a_json_snapshot_between_events() -> None:
    playbook = parse(WRITES)
    harness = RouterHarness(playbook)
    state = ExecutionState.from_dict(to_plain(harness.state.to_dict()))
    command = harness.pending[0]
    state = apply(playbook, state, router_event(outcome_event(command, Reply(result={"n": 2, "id": "y"}))),
                  1.0).state
    assert state.ctx["total"] == 12
    (after,) = [o.body for o in state.outbox if isinstance(o.body, Command)]
    assert after.step == "after"


def test_a_committed_command_reads_back_as_the_command_it_was() -> None:
    harness = RouterHarness(parse("""
        workflow:
          - step: start
            tool: {kind: noop, input: {v: "{{ workload.v }}"}}
    """), workload={"v": 1})
    (sent,) = [o for o in harness.state.outbox if o.kind == "command"]
    (stored,) = [o for o in ExecutionState.from_dict(harness.state.to_dict()).outbox
                 if o.kind == "command"]
    assert isinstance(stored.body, Command) and stored.body.tasks.tasks[0].kind == "noop"
    assert jsonutil.dumps(stored.body) == jsonutil.dumps(sent.body)  # published as it was built
    with pytest.raises(TypeError):
        stored.plain_body  # noqa: B018 - a command has no plain body


def test_router_unknown_event_type_changes_nothing() -> None:
    harness = RouterHarness(parse("""
        workflow:
          - step: start
    """))
    before = snapshot(harness.state)
    event = {"event_type": "task.started", "execution_id": "exec1",
             "step_run_id": harness.pending[0]["step_run_id"]}
    assert harness.send(event) == []
    assert snapshot(harness.state) == before


def test_router_iteration_ctx_patches_apply_in_arrival_order() -> None:
    harness = RouterHarness(parse(PARALLEL_PAIR))
    first, second = harness.pending
    harness.answer(second, Reply(ctx_patch={"last": "second"}))
    harness.answer(first, Reply(ctx_patch={"last": "first"}))
    assert harness.state.ctx == {"last": "first"}


def test_router_duplicate_loop_iteration_event_does_not_patch_ctx_again() -> None:
    harness = RouterHarness(parse(PARALLEL_PAIR))
    first = harness.pending[0]
    harness.answer(first, Reply(ctx_patch={"last": "first"}))
    assert harness.send(outcome_event(first, Reply(ctx_patch={"last": "replayed"}))) == []
    assert harness.state.ctx == {"last": "first"}


def test_router_outcome_with_a_non_integer_iteration_is_refused_before_the_router() -> None:
    harness = RouterHarness(parse(PARALLEL_PAIR))
    second = harness.pending[1]
    before = snapshot(harness.state)
    for wrong in (True, 1.0, "1", [1]):
        with pytest.raises(Malformed, match=r"^iteration: "):
            harness.send({**outcome_event(second), "iteration": wrong})
    assert snapshot(harness.state) == before


@pytest.mark.parametrize(("field", "value"), [
    ("ctx_patch", "not a mapping"),
    ("ctx_patch", [1, 2]),
    ("error", "a bare string"),
    ("error", ["a", "list"]),
    ("http", "not a mapping"),
    ("result", {"nested": [1, {"deep": None}]}),
])
@pytest.mark.parametrize("ok", [True, False], ids=["done", "failed"])
def test_router_malformed_outcome_fields_do_not_break_apply(field: str, value: Any, ok: bool) -> None:
    harness = RouterHarness(parse("""
        workflow:
          - step: start
            next: after
          - step: after
            tool: {kind: python, code: "result = 1", input: {s: "{{ start }}"}}
    """))
    harness.send({**outcome_event(harness.pending[0], Reply(ok=ok, result={"k": 1})), field: value})
    harness.run()
    assert harness.state.status == ("completed" if ok else "failed")
    if not ok:
        assert harness.state.error is not None
        assert harness.state.error["step"] == "start"
