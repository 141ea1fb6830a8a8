"""Pull consumers in a priority group with the pinned_client policy (the router's partitions,
bus/pull.py and server/partitions.py), on a real nats-server: one client at a time gets the
messages, the pin moves to a stand-by when its holder goes silent for the priority timeout, and
`release` hands it over at once."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator

import pytest
from nats.js.api import StorageType, StreamConfig

from noetl_stream.bus.connection import Bus, connect
from noetl_stream.bus.nats_server import NatsServer
from noetl_stream.bus.pull import PullConsumer, open_pull

pytestmark = pytest.mark.integration

STREAM, DURABLE, GROUP = "PINTEST", "p", "router"
PIN_TTL_S = 2.0


@pytest.fixture
async def other(nats_server: NatsServer) -> AsyncIterator[Bus]:
    """A second connection: another server process."""
    bus = await connect(nats_server.url, name="noetl-stream-test-2")
    try:
        yield bus
    finally:
        await bus.close()


async def _pinned(bus: Bus, ack_wait_s: float) -> str:
    await bus.js.add_stream(StreamConfig(name=STREAM, subjects=["pintest.>"],
                                         storage=StorageType.MEMORY))
    config = {"durable_name": DURABLE, "ack_policy": "explicit",
              "ack_wait": int(ack_wait_s * 1e9),
              "filter_subject": "pintest.>", "priority_groups": [GROUP],
              "priority_policy": "pinned_client", "priority_timeout": int(PIN_TTL_S * 1e9)}
    reply = await bus.nc.request(f"$JS.API.CONSUMER.CREATE.{STREAM}.{DURABLE}",
                                 json.dumps({"stream_name": STREAM, "config": config}).encode())
    assert "error" not in json.loads(reply.data), reply.data
    return STREAM


@pytest.fixture
async def pinned(bus: Bus) -> str:
    return await _pinned(bus, ack_wait_s=30.0)


@pytest.fixture
async def pinned_short_lease(bus: Bus) -> str:
    """As `pinned`, with a lease short enough that a message handed to a dead holder comes
    back within the test.
    """
    return await _pinned(bus, ack_wait_s=1.0)


async def _consumer(bus: Bus) -> PullConsumer:
    return await open_pull(bus, STREAM, DURABLE, credit=16, group=GROUP,
                           expires_s=PIN_TTL_S * 0.4)


async def _drain(consumer: PullConsumer, seconds: float) -> list[bytes]:
    got: list[bytes] = []
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        for m in await consumer.next_batch(100, timeout_s=left):
            got.append(m.data)
            await m.ack()
            await consumer.grant(1)
    return got


async def _publish(bus: Bus, tag: str, n: int) -> None:
    for i in range(n):
        await bus.js.publish(f"pintest.{tag}", f"{tag}{i}".encode())


async def test_one_client_at_a_time_gets_the_messages(bus: Bus, other: Bus, pinned: str) -> None:
    first, second = await _consumer(bus), await _consumer(other)
    try:
        await _publish(bus, "a", 20)
        a, b = await asyncio.gather(_drain(first, 1.5), _drain(second, 1.5))
        # Quiet for longer than the pin's TTL: the holder keeps asking, so it keeps the pin.
        await asyncio.sleep(PIN_TTL_S * 1.5)
        await _publish(bus, "b", 20)
        a2, b2 = await asyncio.gather(_drain(first, 1.5), _drain(second, 1.5))
    finally:
        await first.stop()
        await second.stop()
    holder, stand_by = (a + a2, b + b2) if a else (b + b2, a + a2)
    assert sorted(holder) == sorted([f"a{i}".encode() for i in range(20)]
                                    + [f"b{i}".encode() for i in range(20)])
    assert stand_by == []


async def test_the_pin_moves_to_the_stand_by_when_its_holder_goes_silent(
        bus: Bus, other: Bus, pinned_short_lease: str) -> None:
    holder = await _consumer(bus)
    await _publish(bus, "a", 3)
    assert len(await _drain(holder, 1.0)) == 3
    stand_by = await _consumer(other)
    await other.nc.flush()
    await bus.nc.close()  # as kill -9: no unpin, no more requests
    silent_at = time.monotonic()
    await _publish(other, "b", 5)
    got: list[bytes] = []
    taken_after: float | None = None
    # A message nats-server handed to the holder's last pull before it saw the connection go
    # is that holder's until its lease ends, then comes back to whoever holds the pin.
    while len(set(got)) < 5 and time.monotonic() - silent_at < PIN_TTL_S + 6:
        batch = await _drain(stand_by, 0.2)
        if batch and taken_after is None:
            taken_after = time.monotonic() - silent_at
        got += batch
    await stand_by.stop()
    assert sorted(set(got)) == [f"b{i}".encode() for i in range(5)]
    assert stand_by.pin is not None
    assert taken_after is not None and taken_after < PIN_TTL_S + 1.5, taken_after


async def test_release_hands_the_pin_over_at_once(bus: Bus, other: Bus, pinned: str) -> None:
    holder = await _consumer(bus)
    await _publish(bus, "a", 3)
    assert len(await _drain(holder, 1.0)) == 3
    stand_by = await _consumer(other)
    try:
        await asyncio.sleep(0.2)
        released = asyncio.create_task(holder.release(hold_s=1.0, drain_s=PIN_TTL_S))
        await asyncio.sleep(PIN_TTL_S * 0.5)  # the holder's requests end within their expiry
        t0 = time.monotonic()
        await _publish(bus, "b", 5)
        got = await _drain(stand_by, 1.0)
        assert sorted(got) == [f"b{i}".encode() for i in range(5)]
        assert time.monotonic() - t0 < PIN_TTL_S
        await released
        assert holder.pin is None and stand_by.pin is not None
        # The former holder asks again as a stand-by and gets nothing.
        await _publish(bus, "c", 5)
        a, b = await asyncio.gather(_drain(holder, 1.0), _drain(stand_by, 1.0))
        assert a == [] and len(b) == 5
    finally:
        await holder.stop()
        await stand_by.stop()
