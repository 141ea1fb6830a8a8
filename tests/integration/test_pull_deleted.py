"""A pull consumer whose durable consumer was deleted asks again less and less often, saying so
once, rather than every half second forever; when the consumer is back it gets messages again.
"""

from __future__ import annotations

import asyncio
import itertools
import logging

import pytest
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, StorageType, StreamConfig

from noetl_stream.bus.connection import Bus
from noetl_stream.bus.pull import PullConsumer

STREAM, DURABLE = "PULLGONE", "gone"


async def _add_consumer(bus: Bus) -> None:
    await bus.js.add_consumer(STREAM, ConsumerConfig(
        durable_name=DURABLE, ack_policy=AckPolicy.EXPLICIT, deliver_policy=DeliverPolicy.ALL,
        ack_wait=30, filter_subject="pullgone.>"))


async def test_a_deleted_consumer_is_asked_again_with_backoff(
        bus: Bus, caplog: pytest.LogCaptureFixture) -> None:
    await bus.js.add_stream(StreamConfig(name=STREAM, subjects=["pullgone.>"],
                                         storage=StorageType.MEMORY))
    await _add_consumer(bus)
    asked: list[float] = []

    async def seen(msg: Msg) -> None:
        asked.append(asyncio.get_running_loop().time())

    watch = await bus.nc.subscribe(f"$JS.API.CONSUMER.MSG.NEXT.{STREAM}.{DURABLE}", cb=seen)
    consumer = PullConsumer(bus.nc, STREAM, DURABLE, credit=4, expires_s=5, heartbeat_s=0.2)
    caplog.set_level(logging.INFO, logger="noetl_stream.pull")
    await consumer.start()
    try:
        await asyncio.sleep(0.3)
        await bus.js.delete_consumer(STREAM, DURABLE)
        asked.clear()
        await asyncio.sleep(6.0)
        # 0.5 s apart would be a dozen asks; backing off (0.5, 1, 2, 4 s) asks about four. An
        # ask is a request per lane of the credit (bus/pull_lanes.py), sent together.
        asks = [b for a, b in itertools.pairwise([-1.0, *asked]) if b - a > 0.05]
        assert 1 <= len(asks) <= 5, asked
        gaps = [b - a for a, b in itertools.pairwise(asks)]
        assert gaps == sorted(gaps), gaps
        said = [r.getMessage() for r in caplog.records if "no longer exists" in r.getMessage()]
        assert len(said) == 1, said
        await _add_consumer(bus)
        await bus.js.publish("pullgone.x", b"back")
        batch = await consumer.next_batch(4, timeout_s=15)
        assert [m.data for m in batch] == [b"back"]
    finally:
        await consumer.stop()
        await watch.unsubscribe()
