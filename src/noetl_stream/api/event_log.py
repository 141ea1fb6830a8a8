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
from collections.abc import AsyncIterator

from nats.aio.msg import Msg
from nats.js.api import ConsumerConfig

from noetl_stream.api.models import StoredEvent
from noetl_stream.bus import stream_reads
from noetl_stream.bus.connection import Bus
from noetl_stream.bus.event_feed import EVENTS_STREAM as EVENTS_STREAM  # re-exported
from noetl_stream.bus.event_feed import EventFeed
from noetl_stream.bus.signals import decode_event_body


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


def _page_consumer(bus: Bus, execution_id: str, after_seq: int) -> ConsumerConfig:
    return stream_reads.reader("page", bus.topology.execution_events_filter(execution_id),
                               after_seq)


async def count_after(bus: Bus, execution_id: str, after_seq: int) -> int:
    """How many of the execution's messages the stream holds after `after_seq`."""
    return await stream_reads.count(bus, EVENTS_STREAM, _page_consumer(bus, execution_id, after_seq))


async def read_page(bus: Bus, execution_id: str, *, after_seq: int,
                    limit: int) -> tuple[list[StoredEvent], int]:
    """Up to `limit` events after `after_seq`; also the last sequence read (the next after_seq)."""
    msgs = await stream_reads.read(bus, EVENTS_STREAM, _page_consumer(bus, execution_id, after_seq),
                                   limit=limit)
    out = [event for m in msgs if (event := stored_event(bus, m)) is not None]
    return out, stream_reads.last_sequence(msgs, after_seq)


@contextlib.asynccontextmanager
async def follow(bus: Bus, execution_id: str, *, after_seq: int) -> AsyncIterator[EventFeed]:
    """The execution's messages after `after_seq`, live, in order, once: `await feed.get()`."""
    async with EventFeed(bus.nc, bus.topology.execution_events_filter(execution_id),
                         after_seq=after_seq) as feed:
        yield feed
