"""Turns of the event loop on a sequential step's path through the server, on a real
nats-server with the in-process services: an event's group is applied in the task that took its
batch from the router's partition, so its commit is written in the turn after the copy was
handed to the server, without waiting for another task to be started (server/server.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from noetl_stream.bus.connection import Bus
from noetl_stream.bus.pull import PullConsumer
from noetl_stream.bus.stored_publish import StoredPublisher
from noetl_stream.server.retention import EXECUTIONS_BUCKET
from noetl_stream.services import run_services, submit_and_watch

STEPS = 8
CHAIN = "\n".join(["apiVersion: noetl.io/v2", "kind: Playbook", "metadata:", "  name: turns",
                   "workflow:", *(f"  - step: s{i}\n    tool: {{kind: noop}}\n    next: "
                                  f"[{{step: s{i + 1}}}]" for i in range(1, STEPS)),
                   f"  - step: s{STEPS}\n    tool: {{kind: noop}}"]) + "\n"


async def test_a_router_copy_is_committed_in_the_next_turn_of_the_event_loop(
        bus: Bus, monkeypatch: pytest.MonkeyPatch) -> None:
    turns = 0

    def tick() -> None:  # one call per turn of the event loop
        nonlocal turns
        turns += 1
        ticker[0] = loop.call_soon(tick)

    loop = asyncio.get_running_loop()
    ticker = [loop.call_soon(tick)]
    handed: list[int] = []
    committed: list[int] = []
    on_message, update = PullConsumer._on_message, StoredPublisher.update
    router = bus.topology.router_decl()
    partitions = {router.durable_of(p) for p in range(router.partitions)}

    async def seen(consumer: PullConsumer, *args: Any) -> None:
        msg = args[-1]
        if consumer.name in partitions and not (msg.headers or {}).get("Status"):
            handed.append(turns)
        await on_message(consumer, *args)

    async def commit(publisher: StoredPublisher, bucket: str, *args: Any) -> int:
        if bucket == EXECUTIONS_BUCKET:
            committed.append(turns)
        return await update(publisher, bucket, *args)

    monkeypatch.setattr(PullConsumer, "_on_message", seen)
    monkeypatch.setattr(StoredPublisher, "update", commit)
    try:
        async with run_services(bus):
            final = await submit_and_watch(bus, playbook_text=CHAIN, playbook_file="turns.yaml",
                                           payload={}, on_event=lambda _: None, timeout_s=30)
    finally:
        ticker[0].cancel()
    assert final["event_type"] == "execution.completed"
    # Each step's outcome is handed to the server once, and each leads to one commit.
    assert len(handed) == STEPS and len(committed) == STEPS
    # The first may read the state cold from KV (a pin just taken); every later one is cached.
    assert [c - h for h, c in zip(handed, committed, strict=True)][1:] == [1] * (STEPS - 1)
