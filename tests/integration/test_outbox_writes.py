"""An outbox goes onto the connection in one turn of the event loop (bus/publish.py): every
message is written, in outbox order, before any ack is waited for, so the command a commit
implies leaves the server as soon as the commit's ack is read. On a real nats-server with the
runtime's streams; the outbox is one a server committed (tests/fixtures/inflight-schema-2.json).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from nats.js import errors as js_errors
from nats.js.api import StreamConfig

from noetl_stream.bus import publish
from noetl_stream.bus.connection import Bus
from noetl_stream.bus.publish import publish_outbox, subject_of
from noetl_stream.router.state import ExecutionState, Outgoing

WRITTEN = json.loads((Path(__file__).parents[1] / "fixtures" / "inflight-schema-2.json").read_text())


async def test_every_message_is_written_before_the_event_loop_turns(bus: Bus) -> None:
    outbox = ExecutionState.from_dict(WRITTEN["state"]).outbox
    assert len(outbox) >= 4 and any(m.kind == "command" for m in outbox)
    written = bus.nc.stats["out_msgs"]
    publishing = asyncio.create_task(publish_outbox(bus, outbox))
    await asyncio.sleep(0)  # the task's first step runs, then this one: one turn, no more
    assert bus.nc.stats["out_msgs"] - written == len(outbox)
    await publishing
    # Stored in outbox order: the events stream holds them as the router produced them.
    events = [m for m in outbox if m.kind == "event" and not m.progress]
    stored = await bus.js.stream_info("NOETL_EVENTS")
    last = stored.state.last_seq
    subjects = [(await bus.js.get_msg("NOETL_EVENTS", seq)).subject
                for seq in range(last - len(events) + 1, last + 1)]
    assert subjects == [subject_of(bus, m) for m in events]


async def test_a_refused_message_fails_the_outbox_and_leaves_no_wait_behind(
        bus: Bus, monkeypatch: pytest.MonkeyPatch) -> None:
    await bus.js.add_stream(StreamConfig(name="TINY", subjects=["tiny.>"], max_msg_size=8))
    refused = Outgoing("event", "e1", {"execution_id": "x1", "timestamp": 1.0},
                       event_type="step.done")
    event = Outgoing("event", "e2", {"execution_id": "x1", "timestamp": 1.0},
                     event_type="step.started")
    monkeypatch.setattr(publish, "subject_of", lambda bus_, m: "tiny.big" if m is refused
                        else subject_of(bus_, m))
    with pytest.raises(js_errors.BadRequestError):
        await publish_outbox(bus, [refused, event])
    assert not bus.stored._waiting  # the event's wait was given up with the outbox
