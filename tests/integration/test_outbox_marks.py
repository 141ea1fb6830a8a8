"""A committed outbox read cold is published again only when it is not marked published
(server/outbox_marks.py), however often the state is read and however long after the window.
The outbox is one a server committed (tests/fixtures/inflight-schema-2.json: three commands of a
loop and their events); the nats-server's duplicate window is one second."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from noetl_stream.bus.connection import Bus
from noetl_stream.router.state import ExecutionState
from noetl_stream.server.outbox_marks import OutboxMarks

WRITTEN = json.loads((Path(__file__).parents[1] / "fixtures" / "inflight-schema-2.json").read_text())
STATE = ExecutionState.from_dict(WRITTEN["state"])
COMMANDS = sum(1 for m in STATE.outbox if m.kind == "command")


async def stored_commands(bus: Bus) -> int:
    await bus.nc.flush()
    return (await bus.js.stream_info("NOETL_COMMANDS")).state.messages


async def test_a_marked_outbox_is_never_published_again(one_second_window: Bus) -> None:
    bus, marks = one_second_window, OutboxMarks(one_second_window)
    assert COMMANDS == 3
    await marks.publish(STATE.execution_id, 5, STATE.outbox, None)
    assert await stored_commands(bus) == COMMANDS
    await asyncio.sleep(1.5)  # the window is past: a copy would be stored
    for _ in range(3):  # read cold three times at the revision that went out
        await marks.republish(STATE.execution_id, 5, STATE.outbox, None)
    assert await stored_commands(bus) == COMMANDS


async def test_an_unmarked_outbox_goes_out_again_once_and_is_then_marked(
        one_second_window: Bus) -> None:
    bus, marks = one_second_window, OutboxMarks(one_second_window)
    await marks.publish(STATE.execution_id, 5, STATE.outbox, None)
    await asyncio.sleep(1.5)
    # Revision 6 committed the same messages and its server died before publishing them.
    await marks.republish(STATE.execution_id, 6, STATE.outbox, None)
    assert await stored_commands(bus) == 2 * COMMANDS  # stored again: the workers' claims decide
    await asyncio.sleep(1.5)
    await marks.republish(STATE.execution_id, 6, STATE.outbox, None)
    assert await stored_commands(bus) == 2 * COMMANDS
    assert await marks.published(STATE.execution_id, 6)
    assert not await marks.published(STATE.execution_id, 7)
