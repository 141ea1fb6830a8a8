"""A trigger's history: its events on `<prefix>.triggers.events.<name>.*` in NOETL_TRIGGERS
(applied, paused, resumed, fire and backfill requests, fired, skipped, failed, deleted), read in
stream order through a consumer that lives only as long as the read. Replaying them from the
first rebuilds what the trigger was at any moment (`applied` carries the whole document).
"""

from __future__ import annotations

import contextlib
import secrets

from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from noetl_stream import jsonutil
from noetl_stream.bus.connection import Bus
from noetl_stream.jsonutil import JsonObject
from noetl_stream.server.trigger_ops import TRIGGERS_STREAM

FETCH_TIMEOUT_S = 5.0
MAX_PAGE = 500


def _reader(bus: Bus, name: str, after_seq: int) -> ConsumerConfig:
    return ConsumerConfig(
        name=f"trghist_{secrets.token_hex(8)}", ack_policy=AckPolicy.NONE, mem_storage=True,
        num_replicas=1, inactive_threshold=30.0,
        filter_subject=bus.topology.trigger_event_subject(name, "*"),
        deliver_policy=DeliverPolicy.ALL if after_seq <= 0 else DeliverPolicy.BY_START_SEQUENCE,
        opt_start_seq=None if after_seq <= 0 else after_seq + 1)


async def _pending_after(bus: Bus, name: str, after_seq: int) -> int:
    """How many of the trigger's events the stream holds after `after_seq`."""
    info = await bus.js.add_consumer(TRIGGERS_STREAM, _reader(bus, name, after_seq))
    with contextlib.suppress(Exception):  # it expires by itself when this fails
        await bus.js.delete_consumer(TRIGGERS_STREAM, info.name)
    return int(info.num_pending or 0)


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
    info = await bus.js.add_consumer(TRIGGERS_STREAM, _reader(bus, name, after_seq))
    out: list[JsonObject] = []
    last = after_seq
    try:
        wanted = min(limit, int(info.num_pending or 0))
        if wanted == 0:
            return out, last
        sub = await bus.js.pull_subscribe_bind(info.name, stream=TRIGGERS_STREAM)
        try:
            while len(out) < wanted:
                for msg in await sub.fetch(wanted - len(out), timeout=FETCH_TIMEOUT_S):
                    seq = int(msg.metadata.sequence.stream)
                    last = max(last, seq)
                    event = jsonutil.loads_object(msg.data or b"") or {}
                    out.append({"seq": seq, **event})
        finally:
            await sub.unsubscribe()
    finally:
        with contextlib.suppress(Exception):  # it expires by itself when this fails
            await bus.js.delete_consumer(TRIGGERS_STREAM, info.name)
    return out, last
