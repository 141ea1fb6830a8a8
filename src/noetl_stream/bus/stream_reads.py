"""Reading what a stream holds on one filter subject, in stream order, through a consumer that
lives only as long as the read.

The consumer is named `<prefix>_<hex>`: restricted NATS users may create only consumers they
name (deploy/nats/accounts). It acks nothing, lives in memory, and the server drops it 30 s
after its reader is gone, should deleting it fail. The server says how many messages match when
the consumer is created, so a read never waits for messages that will not come.
"""

from __future__ import annotations

import contextlib
import secrets

from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from noetl_stream.bus.connection import Bus

FETCH_TIMEOUT_S = 5.0
INACTIVE_THRESHOLD_S = 30.0


def reader(prefix: str, filter_subject: str, after_seq: int = 0) -> ConsumerConfig:
    """The consumer of the messages on `filter_subject` after stream sequence `after_seq`."""
    return ConsumerConfig(
        name=f"{prefix}_{secrets.token_hex(8)}", ack_policy=AckPolicy.NONE, mem_storage=True,
        num_replicas=1, inactive_threshold=INACTIVE_THRESHOLD_S, filter_subject=filter_subject,
        deliver_policy=DeliverPolicy.ALL if after_seq <= 0 else DeliverPolicy.BY_START_SEQUENCE,
        opt_start_seq=None if after_seq <= 0 else after_seq + 1)


async def count(bus: Bus, stream: str, config: ConsumerConfig) -> int:
    """How many messages the consumer `config` would deliver now."""
    info = await bus.js.add_consumer(stream, config)
    with contextlib.suppress(Exception):  # it expires by itself when this fails
        await bus.js.delete_consumer(stream, info.name)
    return int(info.num_pending or 0)


async def read(bus: Bus, stream: str, config: ConsumerConfig, *, limit: int | None = None,
               batch: int | None = None) -> list[Msg]:
    """The first `limit` (None: all) of the messages the consumer `config` delivers, fetched
    `batch` at a time (None: all at once).
    """
    info = await bus.js.add_consumer(stream, config)
    msgs: list[Msg] = []
    try:
        pending = int(info.num_pending or 0)
        wanted = pending if limit is None else min(limit, pending)
        if wanted == 0:
            return msgs
        sub = await bus.js.pull_subscribe_bind(info.name, stream=stream)
        try:
            while len(msgs) < wanted:
                left = wanted - len(msgs)
                msgs += await sub.fetch(left if batch is None else min(batch, left),
                                        timeout=FETCH_TIMEOUT_S)
        finally:
            await sub.unsubscribe()
    finally:
        with contextlib.suppress(Exception):  # it expires by itself when this fails
            await bus.js.delete_consumer(stream, info.name)
    return msgs


def last_sequence(msgs: list[Msg], after_seq: int) -> int:
    """The stream sequence of the last of `msgs` (read after `after_seq`): the next start."""
    return max([after_seq, *(int(m.metadata.sequence.stream) for m in msgs)])
