"""The in-memory harness answers commands with the outcome events a worker would publish."""

from __future__ import annotations

import pytest
from unit_helpers import parse

from noetl_stream.testing import Reply, RouterHarness, outcome_event

COMMAND = {"execution_id": "e1", "step": "s", "step_run_id": "e1.s.1", "iteration": None}


def test_outcome_event_for_a_plain_step_is_step_done_with_the_result() -> None:
    assert outcome_event(COMMAND, Reply(result=[1], ctx_patch={"k": 1})) == {
        "event_type": "step.done", "execution_id": "e1", "step": "s", "step_run_id": "e1.s.1",
        "pool": "default", "iteration": None, "result": [1], "error": None, "ctx_patch": {"k": 1},
        "http": None, "status": "ok", "timestamp": 0.0, "parent_execution_id": None}


def test_outcome_event_failure_carries_a_default_error() -> None:
    event = outcome_event(COMMAND, Reply(ok=False, result="ignored"))
    assert (event["event_type"], event["result"], event["error"]) == (
        "step.failed", None, {"message": "task failed"})


@pytest.mark.parametrize(("ok", "event_type"), [(True, "loop.iteration.done"),
                                                (False, "loop.iteration.failed")])
def test_outcome_event_for_an_iteration_names_the_iteration(ok: bool, event_type: str) -> None:
    event = outcome_event({**COMMAND, "iteration": 2}, Reply(ok=ok))
    assert (event["event_type"], event["iteration"]) == (event_type, 2)


def test_harness_run_stops_when_the_responder_holds_back() -> None:
    harness = RouterHarness(parse("""
        workflow:
          - step: start
            next: later
          - step: later
    """))
    harness.run(lambda c: Reply() if c["step"] == "start" else None)
    assert [c["step"] for c in harness.pending] == ["later"]
    assert harness.state.status == "running"
    harness.run()
    assert harness.state.status == "completed"
    assert [e["event_type"] for e in harness.applied] == ["step.done", "step.done"]


def test_harness_run_gives_up_on_an_endless_loop() -> None:
    harness = RouterHarness(parse("""
        workflow:
          - step: start
            next: start
    """))
    with pytest.raises(RuntimeError, match="still running after 5 events"):
        harness.run(max_events=5)


def test_an_outcome_counts_only_from_the_pool_its_command_was_sent_to() -> None:
    harness = RouterHarness(parse("""
        workflow:
          - step: start
            pool: secure
            tool: {kind: python, code: "result = 1"}
    """))
    (command,) = harness.pending_for("start")
    for forged_pool in ("default", None, "secure.x"):
        harness.send(outcome_event(command, Reply(result="forged"), pool=forged_pool))  # type: ignore[arg-type]
    assert harness.state.status == "running" and harness.state.steps["start"].result is None
    harness.answer(command, Reply(result="real"))
    assert harness.state.status == "completed"
    assert harness.state.steps["start"].result == "real"
