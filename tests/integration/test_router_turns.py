"""Turns of the event loop on a sequential step's path through the server, on a real
nats-server with the in-process services: an event's group is applied in the task that took its
batch from the router's partition, so its commit is written in the turn after the copy was
handed to the server, without waiting for another task to be started (server/server.py)."""

from __future__ import annotations

from typing import Any

import pytest
from loop_turns import STEPS, counting_turns, run_chain

from noetl_stream.bus.connection import Bus
from noetl_stream.bus.pull import PullConsumer
from noetl_stream.bus.stored_publish import StoredPublisher
from noetl_stream.server.retention import EXECUTIONS_BUCKET


async def test_a_router_copy_is_committed_in_the_next_turn_of_the_event_loop(
        bus: Bus, monkeypatch: pytest.MonkeyPatch) -> None:
    handed: list[int] = []
    committed: list[int] = []
    on_message, update = PullConsumer._on_message, StoredPublisher.update
    router = bus.topology.router_decl()
    partitions = {router.durable_of(p) for p in range(router.partitions)}

    async def seen(consumer: PullConsumer, *args: Any) -> None:
        msg = args[-1]
        if consumer.name in partitions and not (msg.headers or {}).get("Status"):
            handed.append(turns.count)
        await on_message(consumer, *args)

    async def commit(publisher: StoredPublisher, bucket: str, *args: Any) -> int:
        if bucket == EXECUTIONS_BUCKET:
            committed.append(turns.count)
        return await update(publisher, bucket, *args)

    monkeypatch.setattr(PullConsumer, "_on_message", seen)
    monkeypatch.setattr(StoredPublisher, "update", commit)
    with counting_turns() as turns:
        final = await run_chain(bus)
    assert final["event_type"] == "execution.completed"
    # Each step's outcome is handed to the server once, and each leads to one commit.
    assert len(handed) == STEPS and len(committed) == STEPS
    # The first may read the state cold from KV (a pin just taken); every later one is cached.
    assert [c - h for h, c in zip(handed, committed, strict=True)][1:] == [1] * (STEPS - 1)
