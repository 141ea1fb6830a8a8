"""The pull consumer of server, worker and dead-letter loops (bus/pull.py), on a real
nats-server: credit bounds what it holds, requests are renewed when they expire or the consumer
comes back, and what it did not hand over goes back to the stream when it stops."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, StorageType, StreamConfig

from noetl_stream.bus.connection import Bus
from noetl_stream.bus.delivery import (
    Delivery,
    delivery_of,
    delivery_with_time,
    pending_of,
    stored_time_of,
)
from noetl_stream.bus.pull import PullConsumer, open_pull

STREAM, DURABLE, SUBJECT = "PULLTEST", "c", "pulltest.x"


@pytest.fixture
async def stream(bus: Bus) -> str:
    await bus.js.add_stream(StreamConfig(name=STREAM, subjects=["pulltest.>"],
                                         storage=StorageType.MEMORY))
    await _add_consumer(bus)
    return STREAM


async def _add_consumer(bus: Bus) -> None:
    await bus.js.add_consumer(STREAM, ConsumerConfig(
        durable_name=DURABLE, ack_policy=AckPolicy.EXPLICIT, deliver_policy=DeliverPolicy.ALL,
        ack_wait=30, filter_subject="pulltest.>"))


async def _publish(bus: Bus, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        await bus.js.publish(SUBJECT, str(i).encode())


async def _take(consumer: PullConsumer, want: int, limit: int = 100) -> list[bytes]:
    got: list[bytes] = []
    while len(got) < want:
        batch = await consumer.next_batch(limit, timeout_s=10)
        assert batch, f"only {len(got)} of {want} messages arrived"
        got += [m.data for m in batch]
        for m in batch:
            await m.ack()
    return got


async def test_credit_bounds_what_the_consumer_holds(bus: Bus, stream: str) -> None:
    consumer = await open_pull(bus, stream, DURABLE, credit=2)
    try:
        await _publish(bus, 5)
        assert await _take(consumer, 2) == [b"0", b"1"]
        # No credit left: the other three stay in the stream for someone else.
        assert await consumer.next_batch(10, timeout_s=0.5) == []
        info = await bus.js.consumer_info(stream, DURABLE)
        assert info.num_pending == 3
        await consumer.grant(2)
        assert await _take(consumer, 2) == [b"2", b"3"]
        await consumer.grant(2)
        assert await _take(consumer, 1) == [b"4"]
    finally:
        await consumer.stop()


async def test_a_message_after_quiet_time_arrives_alone(bus: Bus, stream: str) -> None:
    # The request outstanding asks for 8; one message must come without the other seven.
    consumer = PullConsumer(bus.nc, stream, DURABLE, credit=8, expires_s=0.4, heartbeat_s=0.1)
    await consumer.start()
    try:
        await asyncio.sleep(1.0)  # the first requests expired (408) and were asked again
        await _publish(bus, 1)
        batch = await consumer.next_batch(8, timeout_s=10)
        assert [m.data for m in batch] == [b"0"]
    finally:
        await consumer.stop()


async def test_requests_come_back_with_the_consumer(bus: Bus, stream: str) -> None:
    consumer = PullConsumer(bus.nc, stream, DURABLE, credit=4, expires_s=5, heartbeat_s=0.2)
    await consumer.start()
    try:
        await bus.js.delete_consumer(stream, DURABLE)
        await asyncio.sleep(0.3)
        await _add_consumer(bus)
        await _publish(bus, 2)
        # Heard nothing on the deleted consumer's requests: they are asked again.
        assert await _take(consumer, 2) == [b"0", b"1"]
    finally:
        await consumer.stop()


async def test_stop_gives_back_what_was_not_taken(bus: Bus, stream: str) -> None:
    consumer = await open_pull(bus, stream, DURABLE, credit=3)
    await _publish(bus, 3)
    for _ in range(100):  # all three delivered into the consumer, none taken
        if (await bus.js.consumer_info(stream, DURABLE)).num_ack_pending == 3:
            break
        await asyncio.sleep(0.05)
    await consumer.stop()
    # Given back at once (nak), not after the 30 s AckWait: another consumer takes them now.
    other = await open_pull(bus, stream, DURABLE, credit=3)
    try:
        assert sorted(await _take(other, 3)) == [b"0", b"1", b"2"]
    finally:
        await other.stop()
    assert not bus.reconnect_listeners  # stopped consumers no longer listen for reconnects


async def test_delivery_numbers_read_from_the_ack_subject_match_nats_py(bus: Bus,
                                                                        stream: str) -> None:
    """bus/delivery.py reads the ack subject nats-server writes as nats-py's metadata does,
    redeliveries included."""
    await _publish(bus, 3)
    consumer = await open_pull(bus, stream, DURABLE, credit=3)
    try:
        first = await consumer.next_batch(3, timeout_s=10)
        while len(first) < 3:
            first += await consumer.next_batch(3, timeout_s=10)
        await first[1].nak()
        await consumer.grant(1)
        again = await consumer.next_batch(1, timeout_s=10)
        for msg in [*first, *again]:
            meta = msg.metadata
            assert delivery_of(msg) == Delivery(meta.num_delivered, meta.sequence.stream,
                                                meta.sequence.consumer)
            assert pending_of(msg) == meta.num_pending
            assert stored_time_of(msg) == meta.timestamp
            read = delivery_with_time(msg)
            assert read is not None and read[0] == delivery_of(msg)
            assert read[1] is not None and datetime.fromtimestamp(read[1], UTC) == meta.timestamp
        assert delivery_of(again[0]) == Delivery(2, 2, 4)
        for msg in [first[0], first[2], again[0]]:
            await msg.ack()
    finally:
        await consumer.stop()
    plain = Msg(bus.nc, subject="x", reply="_INBOX.abc", data=b"")
    assert delivery_of(plain) is None
    assert pending_of(plain) is None and stored_time_of(plain) is None
    assert delivery_with_time(plain) is None
