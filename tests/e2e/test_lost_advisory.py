"""A command reaches its max deliveries while nats-server's store is full: JetStream's
max-deliveries advisory finds no room in `NOETL_ADVISORIES` and is never sent again, so the
dead-letter service never hears of it. Once space is back, the stall check finds the command
still in the work queue with its deliveries spent and dead-letters it: the step fails with kind
`dead_letter` and the execution ends instead of staying `running` (real nats-server with a small
`max_file_store`, the server's services in this process, a worker that dies on every delivery).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from nats.js.api import StreamConfig
from nats.js.errors import APIError, KeyNotFoundError

from noetl_stream import jsonutil
from noetl_stream.bus.connection import Bus
from noetl_stream.bus.nats_server import MAX_PAYLOAD
from noetl_stream.bus.provision import provision
from noetl_stream.bus.storage import storage_refusal
from noetl_stream.messages import ExecutionRequest, RequestReply
from noetl_stream.server.execution_ids import new_execution_id
from noetl_stream.server.stalls import StallCheck
from noetl_stream.services import run_services
from noetl_stream.subjects import load_topology
from noetl_stream.testing.cluster import small_store_node
from noetl_stream.testing.waiting import assert_eventually

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

STORE_LIMIT = 32 * 1024 * 1024
ACK_WAIT_S = 1.0
MAX_DELIVER = 2
PLAYBOOK = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: lost-advisory}
workflow:
  - step: start
    tool: {kind: noop}
"""


@pytest.fixture
async def small_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Bus]:
    monkeypatch.setenv("NOETL_STREAM_COMMAND_ACK_WAIT_S", str(ACK_WAIT_S))
    monkeypatch.setenv("NOETL_STREAM_COMMAND_MAX_DELIVER", str(MAX_DELIVER))
    monkeypatch.setenv("NOETL_STREAM_STORE_BYTES", str(STORE_LIMIT // 2))
    load_topology.cache_clear()
    async with small_store_node(tmp_path, STORE_LIMIT, name="lost-advisory-test",
                                max_payload=MAX_PAYLOAD) as (_, bus):
        await provision(bus)
        yield bus
        load_topology.cache_clear()


async def fill(bus: Bus) -> None:
    """Fill the store to the last byte with a stream of its own."""
    await bus.js.add_stream(StreamConfig(name="FILLER", subjects=["filler.>"]))
    for size in (1024 * 1024, 64 * 1024, 1024, 64):
        while True:
            try:
                await bus.js.publish("filler.x", b"x" * size)
            except APIError as exc:
                assert storage_refusal(exc), exc
                break


async def state_of(bus: Bus, execution_id: str) -> dict[str, Any]:
    kv = await bus.js.key_value("noetl_executions")
    try:
        entry = await kv.get(execution_id)
    except KeyNotFoundError:
        return {}
    return jsonutil.loads_object(entry.value or b"{}") or {}


async def test_a_command_past_its_max_deliveries_during_a_full_store_still_fails_its_step(
        small_store: Bus) -> None:
    bus = small_store
    execution_id = new_execution_id()
    async with run_services(bus, worker=False):
        inbox = bus.nc.new_inbox()
        sub = await bus.nc.subscribe(inbox, max_msgs=1)
        request = ExecutionRequest(execution_id=execution_id, playbook=PLAYBOOK,
                                   playbook_file="lost.yaml", reply_to=inbox)
        await bus.nc.publish("noetl.requests.execute", request.model_dump_json().encode())
        assert RequestReply.model_validate_json((await sub.next_msg(timeout=30)).data).accepted

        # A worker that dies with every delivery: it takes the command and never answers.
        dying = await bus.js.pull_subscribe_bind("noetl-workers-default", "NOETL_COMMANDS")
        first = await dying.fetch(1, timeout=30)
        assert first[0].metadata.num_delivered == 1
        await fill(bus)
        last = await dying.fetch(1, timeout=30)
        assert last[0].metadata.num_delivered == MAX_DELIVER
        await asyncio.sleep(ACK_WAIT_S * 2)  # the last lease lapses
        # The worker asks again: JetStream now gives up on the command (nothing is delivered)
        # and announces it, into a store with no room.
        with pytest.raises(TimeoutError):
            await dying.fetch(1, timeout=2)

        await bus.js.delete_stream("FILLER")  # space is back
        advisories = await bus.js.stream_info("NOETL_ADVISORIES")
        assert advisories.state.messages == 0, "the advisory was stored after all"
        assert (await state_of(bus, execution_id)).get("status") == "running"

        stalls = StallCheck(bus, every_s=0.5)
        await asyncio.sleep(1)  # the command is older than one period

        async def ended() -> dict[str, Any]:
            await stalls.check()
            state = await state_of(bus, execution_id)
            assert state.get("status") == "failed", state.get("status")
            return state

        final = await assert_eventually(ended, timeout_s=60, interval_s=0.6)
    error = final["steps"]["start"]["error"]
    assert error["kind"] == "dead_letter", error
    assert "advisory was never stored" in error["message"], error
    commands = await bus.js.stream_info("NOETL_COMMANDS")
    assert commands.state.messages == 0, "the spent command is still in the work queue"
    dlq = await bus.js.stream_info("NOETL_DLQ")
    assert dlq.state.messages == 1
