"""Turns of the event loop on a sequential step's path through the worker, on a real nats-server
with the in-process services: the first command of a batch is handled in the task that took the
batch from the pool's consumer, so its `task.started` is written in the turn after the command
was handed to the worker, without waiting for a task of its own to be started
(worker/worker.py)."""

from __future__ import annotations

from typing import Any

import pytest
from loop_turns import STEPS, counting_turns, run_chain

from noetl_stream.bus.connection import Bus
from noetl_stream.bus.pull import PullConsumer
from noetl_stream.subjects import DEFAULT_POOL
from noetl_stream.worker.attempt_claims import AttemptStart


async def test_a_command_is_started_in_the_next_turn_of_the_event_loop(
        bus: Bus, monkeypatch: pytest.MonkeyPatch) -> None:
    handed: list[int] = []
    started: list[int] = []
    on_message, publish = PullConsumer._on_message, AttemptStart._publish
    durable = bus.topology.pool_consumer(DEFAULT_POOL).durable

    async def seen(consumer: PullConsumer, *args: Any) -> None:
        msg = args[-1]
        if consumer.name == durable and not (msg.headers or {}).get("Status"):
            handed.append(turns.count)
        await on_message(consumer, *args)

    async def start(claim: AttemptStart, *args: Any) -> Any:
        started.append(turns.count)
        return await publish(claim, *args)

    monkeypatch.setattr(PullConsumer, "_on_message", seen)
    monkeypatch.setattr(AttemptStart, "_publish", start)
    with counting_turns() as turns:
        final = await run_chain(bus)
    assert final["event_type"] == "execution.completed"
    # One command per step, each started once (nothing was delivered twice).
    assert len(handed) == STEPS and len(started) == STEPS
    assert [s - h for h, s in zip(handed, started, strict=True)] == [1] * STEPS
