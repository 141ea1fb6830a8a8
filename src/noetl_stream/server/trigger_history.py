"""A trigger's history: its events on `<prefix>.triggers.events.<name>.*` in NOETL_TRIGGERS
(applied, paused, resumed, fire and backfill requests, fired, skipped, failed, deleted), read in
stream order through a consumer that lives only as long as the read. Replaying them from the
first rebuilds what the trigger was at any moment (`applied` carries the whole document).
"""

from __future__ import annotations

from nats.js.api import ConsumerConfig

from noetl_stream import jsonutil
from noetl_stream.bus import stream_reads
from noetl_stream.bus.connection import Bus
from noetl_stream.jsonutil import JsonObject
from noetl_stream.server.trigger_ops import TRIGGERS_STREAM

MAX_PAGE = 500


def _reader(bus: Bus, name: str, after_seq: int) -> ConsumerConfig:
    return stream_reads.reader("trghist", bus.topology.trigger_event_subject(name, "*"), after_seq)


async def _pending_after(bus: Bus, name: str, after_seq: int) -> int:
    """How many of the trigger's events the stream holds after `after_seq`."""
    return await stream_reads.count(bus, TRIGGERS_STREAM, _reader(bus, name, after_seq))


async def newest_start(bus: Bus, name: str, limit: int) -> int:
    """The `after_seq` from which the trigger's newest `limit` events follow: a binary search
    over stream sequences on the count the server gives for each start (a few dozen probes
    for any stream), so a long history is not read from its beginning.
    """
    if await _pending_after(bus, name, 0) <= limit:
        return 0
    low, high = 0, int((await bus.js.stream_info(TRIGGERS_STREAM)).state.last_seq)
    while high - low > 1:  # pending(low) > limit >= pending(high)
        middle = (low + high) // 2
        if await _pending_after(bus, name, middle) > limit:
            low = middle
        else:
            high = middle
    return high


async def history(bus: Bus, name: str, *, after_seq: int = 0, limit: int = 100,
                  newest: bool = False) -> tuple[list[JsonObject], int]:
    """Up to `limit` events of the trigger after stream sequence `after_seq` (or, with
    `newest`, the last `limit`), oldest first, each with its `seq`; also the last sequence read
    (the next page's `after_seq`).
    """
    limit = max(1, min(limit, MAX_PAGE))
    if newest:
        after_seq = max(after_seq, await newest_start(bus, name, limit))
    msgs = await stream_reads.read(bus, TRIGGERS_STREAM, _reader(bus, name, after_seq),
                                   limit=limit)
    out = [{"seq": int(m.metadata.sequence.stream), **(jsonutil.loads_object(m.data or b"") or {})}
           for m in msgs]
    return out, stream_reads.last_sequence(msgs, after_seq)
