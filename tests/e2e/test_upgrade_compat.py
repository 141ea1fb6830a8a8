"""The compatibility rule of docs/deploy.md ("Upgrading"): a state written by the previous
version (tests/fixtures/state-0.1.0.json: an approval waiting for its signal, as 0.1.0 stored it)
is read and resumed by this one; fields a newer version adds are ignored; request and reply
messages of the previous version still validate."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from noetl_stream import ids, jsonutil
from noetl_stream.messages import ExecutionRequest, RequestReply
from noetl_stream.router.state import ExecutionState
from noetl_stream.runtime.connection import Bus
from noetl_stream.runtime.services import run_services
from noetl_stream.runtime.signals import publish_signal
from noetl_stream.runtime.watcher import ExecutionWatch

pytestmark = pytest.mark.e2e

FIXTURE = json.loads((Path(__file__).parents[1] / "fixtures" / "state-0.1.0.json").read_text())


def test_a_previous_state_reads_and_round_trips() -> None:
    stored: dict[str, Any] = FIXTURE["state"]
    state = ExecutionState.from_dict(stored)

    assert state.status == "running"
    assert [r.step for r in state.active_runs] == ["wait_for_approval"]
    assert _as_stored(state.to_dict()) == stored


def _as_stored(written: dict[str, Any]) -> dict[str, Any]:
    """What this version writes, less the fields added since 0.1.0, which must still hold their
    defaults for a state that never had them (the rule: fields are only added, with defaults).
    Results moved out of the state: a record (or the state) names a stored result by
    `result_key` and carries `result` inline only while it is not stored, so a `null` result is
    left out; a 0.1.0 result is not stored yet and stays inline."""
    added = {k: v for k, v in written.items() if k not in FIXTURE["state"]}
    fresh = ExecutionState(execution_id="x", playbook_key="k", workload={}).to_dict()
    assert added == {k: fresh[k] for k in added}, "a field added since 0.1.0 has no default"
    out = {k: v for k, v in written.items() if k in FIXTURE["state"]}
    out.setdefault("result", None)
    for record in out["steps"].values():
        assert record.pop("result_key") is None
        record.setdefault("result", None)
    return out


def test_fields_a_newer_version_adds_are_ignored() -> None:
    newer = copy.deepcopy(FIXTURE["state"])
    newer["added_later"] = {"x": 1}
    for run in newer["runs"].values():
        run["added_later"] = 2
    for record in newer["steps"].values():
        record["added_later"] = 3
    for message in newer["outbox"]:
        message["added_later"] = 4

    assert _as_stored(ExecutionState.from_dict(newer).to_dict()) == FIXTURE["state"]


def test_previous_messages_still_validate() -> None:
    request = {"execution_id": "1", "playbook": FIXTURE["playbook"], "payload": {"a": 1},
               "reply_to": "_INBOX.x"}
    assert ExecutionRequest.model_validate(request).payload == {"a": 1}
    old_reply = {"accepted": True, "execution_id": "1", "errors": []}
    assert RequestReply.model_validate(old_reply).conflict is False


async def test_a_previous_state_resumes_on_this_version(bus: Bus) -> None:
    state = FIXTURE["state"]
    execution_id = state["execution_id"]
    assert ids.playbook_key(FIXTURE["playbook"]) == state["playbook_key"]
    await (await bus.js.key_value("noetl_catalog")).put(state["playbook_key"],
                                                       FIXTURE["playbook"].encode())
    await (await bus.js.key_value("noetl_executions")).create(execution_id, jsonutil.dumps(state))

    watch = ExecutionWatch(bus, execution_id)
    await watch.start()
    try:
        async with run_services(bus, python_children=1):
            await publish_signal(bus, execution_id, "approve", {"user": "ada"})
            final = await watch.wait(30)
    finally:
        await watch.stop()
    assert final["status"] == "completed", final.get("error")
    assert final["result"] == {"shipped": 7, "approved_by": "ada"}
