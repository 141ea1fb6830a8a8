"""Ids of work in flight never change between releases: a redelivered command, a state read
again or a request repeated by a newer release computes the ids the earlier one wrote (so
duplicates are dropped and a child is found, not started twice). Golden ids of this version are
in tests/fixtures/formats/ids-2.json; the in-flight executions of earlier builds carry theirs."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from noetl_stream import ids
from noetl_stream.server.outbox_marks import mark_key
from noetl_stream.worker.attempt_claims import claim_key

FIXTURES = Path(__file__).parents[1] / "fixtures"
GOLDEN = json.loads((FIXTURES / "formats" / "ids-2.json").read_text())
IN_FLIGHT = sorted(FIXTURES.glob("inflight-schema-*.json"))
EXECUTION = "383600000000000077"


def test_every_id_is_derived_as_the_golden_ids_say() -> None:
    run = ids.step_run_id(EXECUTION, "work", 1)
    key = f"{run}:0:work_task:1"  # step run, iteration, task, attempt (worker/pipeline.py)
    assert {
        "step_run_id": run,
        "command_msg_id": ids.command_msg_id(run, 0, 1),
        "command_msg_id_outside_loops": ids.command_msg_id(
            ids.step_run_id(EXECUTION, "prepare", 1), None),
        "event_msg_id": ids.event_msg_id(EXECUTION, "loop.iteration.done", run, 0),
        "request_msg_id": ids.request_msg_id(EXECUTION),
        "request_msg_id_with_body": ids.request_msg_id(EXECUTION, b'{"a": 1}'),
        "cancel_msg_id": ids.cancel_msg_id(EXECUTION),
        "signal_msg_id": ids.signal_msg_id(EXECUTION, "approve", "key-1"),
        "playbook_key": ids.playbook_key("apiVersion: noetl.io/v2\n"),
        "idempotency_key": key,
        "child_execution_id": ids.child_execution_id(EXECUTION, key),
        "action_id": ids.action_id(run, 0, "work_task"),
        "claim_key": claim_key(EXECUTION, ids.command_msg_id(run, 0, 1)),
        "outbox_mark_key": mark_key(EXECUTION),
    } == GOLDEN


@pytest.mark.parametrize("fixture", IN_FLIGHT, ids=[p.stem for p in IN_FLIGHT])
def test_the_ids_an_earlier_build_wrote_are_the_ids_this_one_computes(fixture: Path) -> None:
    written = json.loads(fixture.read_text())
    assert written["commands"]
    for message in written["commands"]:
        body = json.loads(base64.b64decode(message["data"]))
        assert message["headers"]["Nats-Msg-Id"] == ids.command_msg_id(
            body["step_run_id"], body["iteration"], body["attempt"])
    worker_events = 0
    for message in written["events"]:
        body = json.loads(base64.b64decode(message["data"]))
        assert message["headers"]["Nats-Msg-Id"] == body["event_id"]
        if body["event_type"] in ("task.started", "step.done", "step.failed"):
            # worker/worker.py: a redelivery's outcome is dropped as the same message
            worker_events += 1
            assert body["event_id"] == ids.event_msg_id(
                written["execution_id"], body["event_type"], body["step_run_id"],
                body.get("iteration"))
    assert worker_events
    assert ids.playbook_key(written["playbook"]) == written["state"]["playbook_key"]
