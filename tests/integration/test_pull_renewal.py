"""A pull consumer's requests across their expiries (bus/pull.py, bus/pull_lanes.py), on a real
nats-server: a request of the consumer waits at every moment, also while another expires and is
asked again, for a router partition's pinned consumer too; the credit stays exact; and what the
two lanes deliver reaches the owner in the order nats-server delivered it.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time

import nats
import pytest
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, StorageType, StreamConfig

from noetl_stream.bus.connection import Bus
from noetl_stream.bus.nats_server import NatsServer
from noetl_stream.bus.pull import PullConsumer
from noetl_stream.bus.pull_lanes import lane_expiry, lanes_of

STREAM, DURABLE, SUBJECT = "RENEW", "c", "renew.x"


@pytest.fixture
async def stream(bus: Bus) -> str:
    await bus.js.add_stream(StreamConfig(name=STREAM, subjects=["renew.>"],
                                         storage=StorageType.MEMORY))
    await bus.js.add_consumer(STREAM, ConsumerConfig(
        durable_name=DURABLE, ack_policy=AckPolicy.EXPLICIT, deliver_policy=DeliverPolicy.ALL,
        ack_wait=30, filter_subject="renew.>"))
    return STREAM


def _sample_waiting(url: str, seconds: float, out: list[int], durable: str = DURABLE) -> None:
    """In a thread of its own: the consumer's waiting requests, as nats-server counts them,
    every few milliseconds for `seconds`."""
    async def sample() -> None:
        nc = await nats.connect(url)
        js = nc.jetstream()
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            out.append((await js.consumer_info(STREAM, durable)).num_waiting)
            await asyncio.sleep(0.005)
        await nc.close()
    asyncio.run(sample())


async def _waiting_while_busy(url: str, consumer: PullConsumer, durable: str) -> list[int]:
    """The waiting requests sampled for 2.5 s while the owner's loop is busy 150 ms at a time;
    the consumer is stopped after."""
    waiting: list[int] = []
    sampler = threading.Thread(target=_sample_waiting, args=(url, 2.5, waiting, durable))
    sampler.start()
    try:
        while sampler.is_alive():
            time.sleep(0.15)  # the owner at work, not reading its connection
            await asyncio.sleep(0.002)
    finally:
        sampler.join()
        await consumer.stop()
    return waiting


async def test_a_request_waits_across_every_expiry(nats_server: NatsServer, bus: Bus,
                                                   stream: str) -> None:
    # Requests expire within 0.8 s; the owner's loop is busy 150 ms at a time, so an expiry is
    # answered up to 150 ms late: only a request asked before it keeps the consumer waiting.
    consumer = PullConsumer(bus.nc, stream, DURABLE, credit=4, expires_s=0.8, heartbeat_s=0.2)
    await consumer.start()
    await bus.nc.flush()
    waiting = await _waiting_while_busy(nats_server.url, consumer, DURABLE)
    assert len(waiting) > 100
    assert min(waiting) >= 1, f"no request waited in {waiting.count(0)} of {len(waiting)} samples"


def _publish_at_expiries(url: str, seconds: float, delivered: list[bool]) -> None:
    """In a thread of its own, for `seconds`: whenever nats-server ends a request of the
    consumer as expired (its 408), store a message at once and say whether nats-server
    delivered it within 30 ms."""
    async def publish() -> None:
        nc = await nats.connect(url)
        js = nc.jetstream()
        expired: asyncio.Queue[None] = asyncio.Queue()

        async def seen(msg: Msg) -> None:
            if msg.headers and msg.headers.get("Status") == "408":
                expired.put_nowait(None)

        await nc.subscribe("_INBOX.>", cb=seen)
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            try:
                await asyncio.wait_for(expired.get(), left)
            except TimeoutError:
                break
            await js.publish(SUBJECT, b"at an expiry")
            until = time.monotonic() + 0.03
            while (info := await js.consumer_info(STREAM, DURABLE)).num_pending and \
                    time.monotonic() < until:
                await asyncio.sleep(0.002)
            delivered.append(info.num_pending == 0)
        await nc.close()
    asyncio.run(publish())


async def test_a_message_stored_at_an_expiry_is_delivered_before_the_owner_asks_again(
        nats_server: NatsServer, bus: Bus, stream: str) -> None:
    # Credit as the router's partitions have it, for a message at a time: one taken and granted
    # back is not asked for again at once (less than half of the credit).
    consumer = PullConsumer(bus.nc, stream, DURABLE, credit=8, expires_s=0.8, heartbeat_s=0.2)
    await consumer.start()
    await bus.nc.flush()  # its requests are on nats-server before the owner is busy
    delivered: list[bool] = []
    publisher = threading.Thread(target=_publish_at_expiries,
                                 args=(nats_server.url, 3.0, delivered))
    publisher.start()
    try:
        while publisher.is_alive():
            # The owner at work, not reading its connection: an expiry now is answered late.
            time.sleep(0.15)
            for m in await consumer.next_batch(8, timeout_s=0.002):
                await m.ack()
                await consumer.grant(1)
    finally:
        publisher.join()
        await consumer.stop()
    assert len(delivered) >= 3
    assert all(delivered), f"{delivered.count(False)} of {len(delivered)} waited for a request"


async def test_credit_stays_exact_across_expiries(bus: Bus, stream: str) -> None:
    consumer = PullConsumer(bus.nc, stream, DURABLE, credit=3, expires_s=0.4, heartbeat_s=0.1)
    await consumer.start()
    try:
        for n in range(10):
            await bus.js.publish(SUBJECT, str(n).encode())
        await asyncio.sleep(1.5)  # several expiries of each lane
        info = await bus.js.consumer_info(stream, DURABLE)
        assert (info.num_ack_pending, info.num_pending) == (3, 7)
        taken = await consumer.next_batch(10, timeout_s=5)
        assert [m.data for m in taken] == [b"0", b"1", b"2"]
        for m in taken[:2]:
            await m.ack()
        await consumer.grant(2)
        # Busy before its requests go out: the liveness watch, due meanwhile, must not take
        # them for lost (nothing was outstanding for a second) and ask for the credit again.
        time.sleep(0.15)
        await asyncio.sleep(1.0)
        info = await bus.js.consumer_info(stream, DURABLE)
        assert (info.num_ack_pending, info.num_pending) == (3, 5)
        assert [m.data for m in await consumer.next_batch(10, timeout_s=5)] == [b"3", b"4"]
        assert consumer.outstanding == 0
    finally:
        await consumer.stop()


async def test_both_lanes_deliver_in_the_order_nats_server_sent(bus: Bus, stream: str) -> None:
    consumer = PullConsumer(bus.nc, stream, DURABLE, credit=64)
    await consumer.start()
    try:
        await asyncio.gather(*(bus.js.publish(SUBJECT, str(n).encode()) for n in range(400)))
        order = [int((await bus.js.get_msg(stream, seq)).data) for seq in range(1, 401)]
        got: list[int] = []
        while len(got) < 400:
            batch = await consumer.next_batch(64, timeout_s=5)
            assert batch
            got += [int(m.data) for m in batch]
            for m in batch:
                await m.ack()
            await asyncio.sleep(0)  # the owner at work: more arrives on both lanes meanwhile
            await consumer.grant(len(batch))
        assert got == order
    finally:
        await consumer.stop()


def test_lane_expiries_keep_apart() -> None:
    assert [lane.credit for lane in lanes_of(1)] == [1]
    assert [lane.credit for lane in lanes_of(5)] == [3, 2]
    for now in (0.0, 0.13, 1.99, 7.5, 100.01):
        first = now + lane_expiry(now, 0.0, 2.0, 0, 2)
        second = now + lane_expiry(now, 0.0, 2.0, 1, 2)
        for at in (first - now, second - now):
            assert 1.0 - 1e-9 <= at < 2.0
        # Each lane on its own grid, a quarter of the expiry from the other's.
        assert abs(first % 1.0) < 1e-9 or abs(first % 1.0 - 1.0) < 1e-9
        assert abs((second - 0.5) % 1.0) < 1e-9 or abs((second - 0.5) % 1.0 - 1.0) < 1e-9
    assert lane_expiry(3.3, 0.0, 2.0, 0, 1) == 2.0


PINNED = "pinned"


async def _pinned_consumer(bus: Bus) -> None:
    """A durable as a router partition's: a priority group whose pin holds for 2 s."""
    config = {"durable_name": PINNED, "ack_policy": "explicit", "deliver_policy": "all",
              "ack_wait": 30 * 10**9, "filter_subject": "renew.>", "priority_groups": ["g"],
              "priority_policy": "pinned_client", "priority_timeout": 2 * 10**9}
    answer = await bus.nc.request(f"$JS.API.CONSUMER.CREATE.{STREAM}.{PINNED}",
                                  json.dumps({"stream_name": STREAM, "config": config}).encode(),
                                  timeout=5)
    assert "error" not in json.loads(answer.data), answer.data


async def test_a_pinned_request_waits_across_every_expiry(nats_server: NatsServer, bus: Bus,
                                                         stream: str) -> None:
    # The router's partitions: a priority group, pinned to the client that took a message, its
    # requests naming the pin, expiring at 0.4 of the pin's time, with the router's credit.
    await _pinned_consumer(bus)
    consumer = PullConsumer(bus.nc, stream, PINNED, credit=128, expires_s=0.8, heartbeat_s=0.2,
                            group="g")
    await consumer.start()
    await bus.js.publish(SUBJECT, b"pins")
    taken = await consumer.next_batch(1, timeout_s=5)
    await taken[0].ack()
    await consumer.grant(1)
    assert consumer.pin is not None
    await bus.nc.flush()
    waiting = await _waiting_while_busy(nats_server.url, consumer, PINNED)
    assert len(waiting) > 100
    assert min(waiting) >= 1, f"no request waited in {waiting.count(0)} of {len(waiting)} samples"
