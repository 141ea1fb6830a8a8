"""Turns of the event loop on a sequential step's path through the worker, on a real nats-server
with the in-process services: the first command of a batch is handled in the task that took the
batch from the pool's consumer, so its `task.started` is written in the turn after the command
was handed to the worker, without waiting for a task of its own to be started
(worker/worker.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from noetl_stream.bus.connection import Bus
from noetl_stream.bus.pull import PullConsumer
from noetl_stream.services import run_services, submit_and_watch
from noetl_stream.subjects import DEFAULT_POOL
from noetl_stream.worker.attempt_claims import AttemptStart

STEPS = 8
CHAIN = "\n".join(["apiVersion: noetl.io/v2", "kind: Playbook", "metadata:", "  name: turns",
                   "workflow:", *(f"  - step: s{i}\n    tool: {{kind: noop}}\n    next: "
                                  f"[{{step: s{i + 1}}}]" for i in range(1, STEPS)),
                   f"  - step: s{STEPS}\n    tool: {{kind: noop}}"]) + "\n"


async def test_a_command_is_started_in_the_next_turn_of_the_event_loop(
        bus: Bus, monkeypatch: pytest.MonkeyPatch) -> None:
    turns = 0

    def tick() -> None:  # one call per turn of the event loop
        nonlocal turns
        turns += 1
        ticker[0] = loop.call_soon(tick)

    loop = asyncio.get_running_loop()
    ticker = [loop.call_soon(tick)]
    handed: list[int] = []
    started: list[int] = []
    on_message, publish = PullConsumer._on_message, AttemptStart._publish
    durable = bus.topology.pool_consumer(DEFAULT_POOL).durable

    async def seen(consumer: PullConsumer, *args: Any) -> None:
        msg = args[-1]
        if consumer.name == durable and not (msg.headers or {}).get("Status"):
            handed.append(turns)
        await on_message(consumer, *args)

    async def start(claim: AttemptStart, *args: Any) -> Any:
        started.append(turns)
        return await publish(claim, *args)

    monkeypatch.setattr(PullConsumer, "_on_message", seen)
    monkeypatch.setattr(AttemptStart, "_publish", start)
    try:
        async with run_services(bus):
            final = await submit_and_watch(bus, playbook_text=CHAIN, playbook_file="turns.yaml",
                                           payload={}, on_event=lambda _: None, timeout_s=30)
    finally:
        ticker[0].cancel()
    assert final["event_type"] == "execution.completed"
    # One command per step, each started once (nothing was delivered twice).
    assert len(handed) == STEPS and len(started) == STEPS
    assert [s - h for h, s in zip(handed, started, strict=True)] == [1] * STEPS
