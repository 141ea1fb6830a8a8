"""The `task.started` events of one attempt, read back from the events stream.

An attempt's start is stored under its msg id (`evt:<execution>:task.started:<step run>:
<iteration>`) with the copy of the command that took it in its `Noetl-Copy` header
(worker/attempt_claims.py). JetStream cannot look a message up by msg id, so the execution's
starts (`noetl.events.<id>.task.started`, one subject) are read, headers only, from a start time
or a stream sequence on. Only a delivery that may follow an earlier start asks (a redelivery, a
copy published again, a command older than the duplicate window), and one whose start the stream
called a duplicate.

The read is worker/event_scan.py's, through consumers named `start_<hex>`. A read that stalls
raises TimeoutError: the command is handed back and comes again (bus/dispositions.py), rather
than taken as never started and run twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from nats.aio.msg import Msg

from noetl_stream.bus.connection import Bus
from noetl_stream.bus.publish import COPY_HEADER
from noetl_stream.worker.event_scan import EventScan, scan_events

CONSUMER_PREFIX = "start_"
START = "task.started"


@dataclass(frozen=True)
class StoredStart:
    """One stored `task.started` of an attempt."""

    seq: int  # its sequence in the events stream
    copy: str | None  # the command's copy that took the attempt; None from an earlier release
    stored_at: datetime | None


@dataclass(frozen=True)
class Scan:
    """Which starts to read: the execution's, from `since` less CLOCK_MARGIN (None: all), or
    from the stream sequence `from_seq`; up to `until_seq` when given.
    """

    execution_id: str
    msg_id: str
    since: datetime | None = None
    from_seq: int | None = None
    until_seq: int | None = None


async def first_start(bus: Bus, scan: Scan) -> StoredStart | None:
    """The attempt's earliest stored start that names its copy, within the scan's bounds."""
    for start in await starts_of(bus, scan):
        if start.copy is not None:
            return start
    return None


async def start_at(bus: Bus, execution_id: str, msg_id: str, seq: int) -> StoredStart | None:
    """The attempt's start stored at `seq` (a duplicate's ack names it); None when gone."""
    starts = await starts_of(bus, Scan(execution_id, msg_id, from_seq=seq, until_seq=seq))
    return next((s for s in starts if s.seq == seq), None)


async def starts_of(bus: Bus, scan: Scan) -> list[StoredStart]:
    """The attempt's stored starts within the scan's bounds, oldest first."""
    found: list[StoredStart] = []

    def take(msg: Msg) -> bool:
        meta = msg.metadata
        seq = meta.sequence.stream
        if scan.until_seq is not None and seq > scan.until_seq:
            return True
        headers = msg.headers or {}
        if headers.get("Nats-Msg-Id") == scan.msg_id:
            found.append(StoredStart(seq, headers.get(COPY_HEADER), meta.timestamp))
        return scan.until_seq is not None and seq >= scan.until_seq

    subject = bus.topology.event_subject(scan.execution_id, START)
    await scan_events(bus, EventScan(CONSUMER_PREFIX, subject, since=scan.since,
                                     from_seq=scan.from_seq), take)
    return found
