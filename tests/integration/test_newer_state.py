"""A server never rewrites an execution state a newer release wrote: the event is handed back
(NAK) and the refusal logged with both versions, the state left byte for byte as it was."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from noetl_stream import jsonutil
from noetl_stream.bus.connection import Bus
from noetl_stream.bus.signals import publish_signal
from noetl_stream.formats import STATE, VERSION_FIELD
from noetl_stream.services import run_services
from noetl_stream.testing.waiting import assert_eventually

FIXTURE = json.loads((Path(__file__).parents[1] / "fixtures" / "state-0.1.0.json").read_text())


async def test_an_event_for_a_newer_state_is_handed_back_and_the_state_left_alone(
        bus: Bus, caplog: pytest.LogCaptureFixture) -> None:
    state = {**FIXTURE["state"], VERSION_FIELD: STATE.current + 1, "added_later": {"x": 1}}
    execution_id = state["execution_id"]
    await (await bus.js.key_value("noetl_catalog")).put(state["playbook_key"],
                                                       FIXTURE["playbook"].encode())
    executions = await bus.js.key_value("noetl_executions")
    written = jsonutil.dumps(state)
    revision = await executions.create(execution_id, written)

    caplog.set_level(logging.WARNING, logger="noetl_stream.server")
    async with run_services(bus, worker=False):
        await publish_signal(bus, execution_id, "approve", {"user": "ada"})

        def refused() -> None:
            assert any("newer_format" in r.getMessage() and
                       f"the state of execution {execution_id} has schema version "
                       f"{STATE.current + 1}; this release reads versions up to "
                       f"{STATE.current}" in r.getMessage() for r in caplog.records)

        await assert_eventually(refused, timeout_s=20)
        # Handed back, not acknowledged: the event is still in the router's work queue.
        assert (await bus.js.stream_info("NOETL_ROUTER")).state.messages == 1
    entry = await executions.get(execution_id)
    assert (entry.revision, entry.value) == (revision, written)
