"""A worker runs one copy of a command per attempt (runtime/attempt_claims.py): a copy stored
again after the duplicate window is acknowledged without running, while a delivery of the message
that holds the claim runs, unless that message's run already stored its outcome. The command is
one a server wrote (tests/fixtures/inflight-schema-2.json), run by a real worker on a real
nats-server whose window is one second."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from noetl_stream import jsonutil
from noetl_stream.formats import CLAIM
from noetl_stream.runtime.attempt_claims import claim_key
from noetl_stream.runtime.connection import Bus, connect
from noetl_stream.runtime.provision import provision
from noetl_stream.runtime.services import run_services
from noetl_stream.subjects import load_topology
from noetl_stream.testing.events import stored_events
from noetl_stream.testing.nats import run_nats_server
from noetl_stream.testing.waiting import assert_eventually

WRITTEN = json.loads((Path(__file__).parents[1] / "fixtures" / "inflight-schema-2.json").read_text())
COMMAND = WRITTEN["commands"][0]
EXECUTION_ID = WRITTEN["execution_id"]
MSG_ID = COMMAND["headers"]["Nats-Msg-Id"]


@pytest.fixture
async def one_second_window(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Bus]:
    monkeypatch.setenv("NOETL_STREAM_DUPLICATE_WINDOW", "1s")
    load_topology.cache_clear()
    try:
        async with run_nats_server(tmp_path / "nats") as server:
            bus = await connect(server.url, name="claims-test")
            try:
                await provision(bus, pools=("later",))
                yield bus
            finally:
                await bus.close()
    finally:
        load_topology.cache_clear()


async def publish_command(bus: Bus) -> int:
    """The command as its server published it; the stream sequence it is stored at."""
    ack = await bus.js.publish(COMMAND["subject"], base64.b64decode(COMMAND["data"]),
                               headers=COMMAND["headers"])
    assert not ack.duplicate
    return ack.seq


async def runs(bus: Bus) -> list[dict[str, Any]]:
    """The iteration's outcomes in the events stream: one per run (the window is past between
    runs, so a second outcome would be stored too)."""
    return [e for e in await stored_events(bus.js, EXECUTION_ID)
            if e["event_type"] == "loop.iteration.done"]


async def queue_empty(bus: Bus) -> None:
    assert (await bus.js.stream_info("NOETL_COMMANDS")).state.messages == 0


async def test_a_copy_stored_after_the_window_is_not_run_again(one_second_window: Bus) -> None:
    bus = one_second_window
    async with run_services(bus, server=False, pool="later", python_children=1):
        first = await publish_command(bus)
        await assert_eventually(lambda: queue_empty(bus), timeout_s=20)
        assert len(await runs(bus)) == 1
        await asyncio.sleep(1.5)  # past the window: the same msg id is stored again
        copy = await publish_command(bus)
        assert copy != first
        await assert_eventually(lambda: queue_empty(bus), timeout_s=20)
        await asyncio.sleep(1.5)  # a second run would have published its outcome by now
    assert len(await runs(bus)) == 1
    claim = await (await bus.js.key_value("noetl_step_results")).get(
        claim_key(EXECUTION_ID, MSG_ID))
    held = CLAIM.read(jsonutil.loads(claim.value or b""))
    assert (held["stream_seq"], held["finished"]) == (first, True)


@pytest.mark.parametrize(("holder", "ended", "ran"), [
    ("this message", False, 1),  # its earlier delivery was lost before an outcome: run again
    ("this message", True, 0),  # its outcome is stored, only the ack was lost: not again
    ("another copy", False, 0),  # a copy stored again after the window: never
])
async def test_a_claimed_attempt_runs_only_for_the_message_that_holds_the_claim_unfinished(
        one_second_window: Bus, holder: str, ended: bool, ran: int) -> None:
    bus = one_second_window
    seq = (await bus.js.stream_info("NOETL_COMMANDS")).state.last_seq + 1
    # The claim an earlier delivery wrote (its worker died, or its ack was lost).
    claimed = seq if holder == "this message" else seq + 1000
    await (await bus.js.key_value("noetl_step_results")).create(
        claim_key(EXECUTION_ID, MSG_ID),
        jsonutil.dumps(CLAIM.stamp({"msg_id": MSG_ID, "stream_seq": claimed, "claimed_at": 0.0,
                                    "finished": ended})))
    assert await publish_command(bus) == seq
    async with run_services(bus, server=False, pool="later", python_children=1):
        await assert_eventually(lambda: queue_empty(bus), timeout_s=20)
        await asyncio.sleep(1.0)
    assert len(await runs(bus)) == ran
