"""Reading one execution's events off the events stream, each with its stream sequence.

Two ways, both on consumers that live only as long as the read:
- `read_page`: an ephemeral pull consumer starting after a sequence. The server tells how many
  messages match when the consumer is created, so a page never waits for messages that will not
  come.
- `follow`: an `EventFeed` (bus/event_feed.py, what `noetl-stream watch` uses too) from a start
  sequence, live until the caller stops, re-created after the loss of its consumer; the stream
  sequence lets a client resume.

Both name their consumers, so they are created through the named subject form the restricted
NATS users are limited to (deploy/nats/accounts).
"""

from __future__ import annotations

import contextlib
import secrets
from collections.abc import AsyncIterator

from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from noetl_stream.api.models import StoredEvent
from noetl_stream.bus.connection import Bus
from noetl_stream.bus.event_feed import EVENTS_STREAM as EVENTS_STREAM  # re-exported
from noetl_stream.bus.event_feed import EventFeed
from noetl_stream.bus.signals import decode_event_body

FETCH_TIMEOUT_S = 5.0


def stored_event(bus: Bus, msg: Msg) -> StoredEvent | None:
    seq = int(msg.metadata.sequence.stream)
    try:
        event = decode_event_body(bus.topology, msg.subject, msg.data, seq)
    except ValueError:
        return None  # not an event envelope; the router terminates such messages too
    if not isinstance(event.get("timestamp"), (int, float)) and msg.metadata.timestamp:
        # A signal's body is the client's data: it is dated by when the stream stored it.
        event["timestamp"] = msg.metadata.timestamp.timestamp()
    return StoredEvent(seq=seq, event_type=str(event["event_type"]), event=event)


def _start(after_seq: int) -> ConsumerConfig:
    if after_seq <= 0:
        return ConsumerConfig(deliver_policy=DeliverPolicy.ALL)
    return ConsumerConfig(deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=after_seq + 1)


def _page_consumer(bus: Bus, execution_id: str, after_seq: int) -> ConsumerConfig:
    config = _start(after_seq)
    config.name = f"page_{secrets.token_hex(8)}"
    config.filter_subject = bus.topology.execution_events_filter(execution_id)
    config.ack_policy = AckPolicy.NONE
    config.mem_storage = True
    config.num_replicas = 1
    config.inactive_threshold = 30.0  # if we die mid-read, the server drops it soon after
    return config


async def count_after(bus: Bus, execution_id: str, after_seq: int) -> int:
    """How many of the execution's messages the stream holds after `after_seq`."""
    info = await bus.js.add_consumer(EVENTS_STREAM, _page_consumer(bus, execution_id, after_seq))
    # The count is had; the consumer expires by itself (inactive threshold) if deleting fails.
    with contextlib.suppress(Exception):
        await bus.js.delete_consumer(EVENTS_STREAM, info.name)
    return int(info.num_pending or 0)


async def read_page(bus: Bus, execution_id: str, *, after_seq: int,
                    limit: int) -> tuple[list[StoredEvent], int]:
    """Up to `limit` events after `after_seq`; also the last sequence read (the next after_seq)."""
    info = await bus.js.add_consumer(EVENTS_STREAM, _page_consumer(bus, execution_id, after_seq))
    last = after_seq
    out: list[StoredEvent] = []
    try:
        wanted = min(limit, int(info.num_pending or 0))
        if wanted == 0:
            return out, last
        sub = await bus.js.pull_subscribe_bind(info.name, stream=EVENTS_STREAM)
        try:
            read = 0
            while read < wanted:
                for msg in await sub.fetch(wanted - read, timeout=FETCH_TIMEOUT_S):
                    read += 1
                    last = max(last, int(msg.metadata.sequence.stream))
                    event = stored_event(bus, msg)
                    if event is not None:
                        out.append(event)
        finally:
            await sub.unsubscribe()
    finally:
        with contextlib.suppress(Exception):  # it expires by itself when this fails
            await bus.js.delete_consumer(EVENTS_STREAM, info.name)
    return out, last


@contextlib.asynccontextmanager
async def follow(bus: Bus, execution_id: str, *, after_seq: int) -> AsyncIterator[EventFeed]:
    """The execution's messages after `after_seq`, live, in order, once: `await feed.get()`."""
    async with EventFeed(bus.nc, bus.topology.execution_events_filter(execution_id),
                         after_seq=after_seq) as feed:
        yield feed
