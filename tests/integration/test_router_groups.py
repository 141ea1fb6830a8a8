"""How a router partition hands its events to executions (server/server.py `_event_loop`), on a
real nats-server: an execution whose commit is slow holds up no other execution of its
partition, and its own events still apply in order."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest
from plain_client import PlainClient

from noetl_stream.bus.connection import Bus
from noetl_stream.server import server as server_module
from noetl_stream.server.partitions import partition_of
from noetl_stream.services import run_services
from noetl_stream.testing.events import stored_events
from noetl_stream.testing.waiting import assert_eventually
from playbook_files import read_playbook

pytestmark = pytest.mark.integration

THREE_NOOPS = read_playbook("integration", "three_noops.yaml")


def _same_partition(bus: Bus, n: int) -> list[str]:
    partitions = bus.topology.router_decl().partitions
    ids = (f"groups{i}" for i in itertools.count())
    first = next(ids)
    return [first, *itertools.islice((i for i in ids if partition_of(i, partitions)
                                      == partition_of(first, partitions)), n - 1)]


async def test_a_slow_commit_holds_up_no_other_execution_of_its_partition(
        bus: Bus, client: PlainClient, monkeypatch: pytest.MonkeyPatch) -> None:
    slow, quick = _same_partition(bus, 2)
    release = asyncio.Event()
    held: list[int] = []
    commit = server_module.Server._commit

    async def held_commit(self: Any, execution_id: str, data: bytes, state: Any,
                          last: int) -> int:
        if execution_id == slow and state.applied == 1:  # its first outcome
            held.append(last)
            await release.wait()
        return await commit(self, execution_id, data, state, last)

    monkeypatch.setattr(server_module.Server, "_commit", held_commit)
    async with run_services(bus):
        slow_feed = await client.follow(slow)
        quick_feed = await client.follow(quick)
        await client.publish_request({"execution_id": slow, "playbook": THREE_NOOPS})
        await assert_eventually(lambda: _holds(held), timeout_s=20)
        await client.publish_request({"execution_id": quick, "playbook": THREE_NOOPS})
        # Every event of `quick` comes through the partition while `slow` waits on its commit.
        await asyncio.wait_for(quick_feed.ended.wait(), 20)
        assert not slow_feed.ended.is_set()
        release.set()
        await asyncio.wait_for(slow_feed.ended.wait(), 20)
    assert quick_feed.final["status"] == "completed"
    assert slow_feed.final["status"] == "completed"
    steps = [e["step"] for e in await stored_events(bus.js, slow)
             if e["event_type"] == "step.done"]
    assert steps == ["start", "middle", "last"]


def _holds(held: list[int]) -> None:
    assert held, "the slow execution's first commit has not been reached"
