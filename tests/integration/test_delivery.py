"""Delivery properties (ARCHITECTURE §6): duplicates are stored once, and a command whose worker
never acknowledges it is redelivered to another worker without the step counting twice."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from plain_client import PlainClient

from noetl_stream.bus.connection import Bus
from noetl_stream.bus.provision import consumer_config
from noetl_stream.services import run_services
from noetl_stream.testing.events import stored_events, stored_messages
from playbook_files import read_playbook

pytestmark = pytest.mark.integration

ONE_STEP = read_playbook("integration", "one_step.yaml")
SLOW_STEP = read_playbook("integration", "slow_step.yaml")


async def test_same_msg_id_published_twice_is_stored_once(bus: Bus) -> None:
    subject = "noetl.events.dedup1.signal.go"
    headers = {"Nats-Msg-Id": "evt:dedup1:signal.go"}

    first = await bus.js.publish(subject, b'{"n": 1}', headers=headers)
    second = await bus.js.publish(subject, b'{"n": 2}', headers=headers)

    assert first.duplicate is not True
    assert second.duplicate is True
    assert second.seq == first.seq
    assert await stored_messages(bus.js, subject) == [(subject, b'{"n": 1}')]


async def test_unacked_command_is_redelivered_and_the_step_counts_once(
        bus: Bus, client: PlainClient) -> None:
    decl = bus.topology.pool_consumer("default")
    # A short AckWait on this test's private server, so redelivery comes within a second.
    await bus.js.add_consumer(decl.stream, consumer_config(dataclasses.replace(decl, ack_wait_s=1.0)))

    async with run_services(bus, worker=False):
        feed = await client.follow("redeliver1")
        await client.publish_request({"execution_id": "redeliver1", "playbook": ONE_STEP})
        # A worker that takes the command and dies before acknowledging it.
        lost = await bus.js.pull_subscribe_bind(decl.durable, stream=decl.stream)
        (taken,) = await lost.fetch(1, timeout=10)
        assert taken.metadata.num_delivered == 1
        await lost.unsubscribe()

        async with run_services(bus, server=False, python_children=1):
            await asyncio.wait_for(feed.ended.wait(), 30)

    final = feed.final
    assert final["status"] == "completed"
    assert final["steps"]["start"] == {"status": "completed", "runs": 1, "result": {"answer": 42}}
    stored = await stored_events(bus.js, "redeliver1")
    done = [e for e in stored if e["event_type"] == "step.done"]
    assert [e["step_run_id"] for e in done] == ["redeliver1.start.1"]
    info = await bus.js.consumer_info(decl.stream, decl.durable)
    assert info.num_ack_pending == 0
    assert info.delivered.consumer_seq == 2  # the lost delivery and the redelivery


async def test_a_task_longer_than_its_lease_keeps_it_and_runs_once(
        bus: Bus, client: PlainClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker renews the lease of a running command (in-progress acks), so a task that runs
    past AckWait is neither redelivered nor run twice."""
    short = dataclasses.replace(bus.topology.pool_consumer("default"), ack_wait_s=1.0)
    await bus.js.add_consumer(short.stream, consumer_config(short))
    # The worker paces its progress acks by the AckWait it reads from the topology.
    monkeypatch.setattr(type(bus.topology), "pool_consumer", lambda self, pool: short)

    async with run_services(bus, python_children=1):
        feed = await client.follow("lease1")
        await client.publish_request({"execution_id": "lease1", "playbook": SLOW_STEP})
        await asyncio.wait_for(feed.ended.wait(), 30)

    assert feed.final["status"] == "completed"
    types = [e["event_type"] for e in await stored_events(bus.js, "lease1")]
    assert "task.redelivered" not in types
    assert types.count("task.started") == 1 and types.count("step.done") == 1
    info = await bus.js.consumer_info(short.stream, short.durable)
    assert info.delivered.consumer_seq == 1 and info.num_ack_pending == 0
