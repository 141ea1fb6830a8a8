"""bus/stream_reads.py on a real nats-server: a read takes the messages on its filter after a
sequence, in stream order, up to its limit and batch by batch, and leaves no consumer behind."""

from __future__ import annotations

import pytest

from noetl_stream.bus import stream_reads
from noetl_stream.bus.connection import Bus
from noetl_stream.bus.event_feed import EVENTS_STREAM

pytestmark = pytest.mark.integration


async def test_a_read_takes_the_filtered_messages_after_a_sequence_in_order(bus: Bus) -> None:
    mine = bus.topology.execution_events_filter("reads1")
    subject = mine.replace(">", "step.done")
    other = bus.topology.execution_events_filter("reads2").replace(">", "step.done")
    consumers = (await bus.js.stream_info(EVENTS_STREAM)).state.consumer_count
    seqs = []
    for n in range(7):
        seqs.append((await bus.js.publish(subject, str(n).encode())).seq)
        await bus.js.publish(other, b"not mine")

    everything = await stream_reads.read(bus, EVENTS_STREAM, stream_reads.reader("page", mine),
                                         batch=2)
    assert [m.data for m in everything] == [str(n).encode() for n in range(7)]
    after = stream_reads.reader("page", mine, after_seq=seqs[1])
    assert await stream_reads.count(bus, EVENTS_STREAM, after) == 5
    page = await stream_reads.read(bus, EVENTS_STREAM, stream_reads.reader(
        "page", mine, after_seq=seqs[1]), limit=3, batch=2)
    assert [m.data for m in page] == [b"2", b"3", b"4"]
    assert stream_reads.last_sequence(page, seqs[1]) == seqs[4]
    assert stream_reads.last_sequence([], seqs[6]) == seqs[6]
    assert await stream_reads.read(bus, EVENTS_STREAM, stream_reads.reader(
        "page", mine, after_seq=seqs[6])) == []
    # Every reader was deleted after its read.
    assert (await bus.js.stream_info(EVENTS_STREAM)).state.consumer_count == consumers
