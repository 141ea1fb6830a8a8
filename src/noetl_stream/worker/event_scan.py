"""One execution's stored events read back on a worker, headers only, oldest first.

JetStream cannot look a message up by msg id, so a worker that must know whether an attempt
started (worker/start_scan.py) or stored its outcome (worker/outcome_lookup.py) reads the events
of one subject from a start time or a stream sequence on and looks at their msg ids. Both ask only
off a step's path (a redelivery, a copy published again, a duplicate start).

The consumer is named (`<prefix><hex>`) and created through the named create subject, the one
form a worker's NATS user may use on the events stream (deploy/nats/accounts); it is pushed to
the worker's own inbox and never deleted (restricted users may not): without interest it goes
after its inactive threshold.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from nats.aio.msg import Msg
from nats.errors import Error as NatsError
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from noetl_stream.bus.connection import Bus
from noetl_stream.bus.event_feed import EVENTS_STREAM

CREATE_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 10.0
INACTIVE_THRESHOLD_S = 10.0
# A time read from one stream (a command's, a claim's) and an event's are on a cluster two
# leaders' clocks. A scan by time starts this much earlier; a wider start only costs reading more.
CLOCK_MARGIN = timedelta(seconds=60)


@dataclass(frozen=True)
class EventScan:
    """Which stored events to read: those on `subject`, from `since` less CLOCK_MARGIN or from
    the stream sequence `from_seq` (neither: all), through a consumer named `prefix` + hex.
    """

    prefix: str
    subject: str
    since: datetime | None = None
    from_seq: int | None = None


async def scan_events(bus: Bus, scan: EventScan, take: Callable[[Msg], bool]) -> None:
    """Hand each event the scan selects to `take`, oldest first, until `take` returns True or
    none is left. A read that stalls for READ_TIMEOUT_S raises TimeoutError.
    """
    inbox = bus.nc.new_inbox()
    arrived: asyncio.Queue[Msg] = asyncio.Queue()

    async def deliver(msg: Msg) -> None:
        arrived.put_nowait(msg)

    sub = await bus.nc.subscribe(inbox, cb=deliver)
    try:
        info = await bus.js.add_consumer(EVENTS_STREAM, _config(scan, inbox),
                                         timeout=CREATE_TIMEOUT_S)
        async with asyncio.timeout(READ_TIMEOUT_S):
            for _ in range(int(info.num_pending or 0)):
                if take(await arrived.get()):
                    return
    finally:
        with contextlib.suppress(NatsError):
            await sub.unsubscribe()


def _config(scan: EventScan, inbox: str) -> ConsumerConfig:
    config = ConsumerConfig(
        name=f"{scan.prefix}{secrets.token_hex(8)}", deliver_subject=inbox,
        filter_subject=scan.subject, ack_policy=AckPolicy.NONE, headers_only=True,
        mem_storage=True, num_replicas=1, inactive_threshold=INACTIVE_THRESHOLD_S)
    if scan.from_seq is not None:
        config.deliver_policy = DeliverPolicy.BY_START_SEQUENCE
        config.opt_start_seq = scan.from_seq
    elif scan.since is not None:
        config.deliver_policy = DeliverPolicy.BY_START_TIME
        config.opt_start_time = scan.since - CLOCK_MARGIN
    else:
        config.deliver_policy = DeliverPolicy.ALL
    return config
