"""The retention sweep's backstop: events left without a state (published after their execution
was purged, or left by a state an earlier version wrote with a TTL) go once they have been seen
so for the retention; the events of an execution that has a state stay."""

from __future__ import annotations

import asyncio

import pytest

from noetl_stream import jsonutil
from noetl_stream.bus.connection import Bus
from noetl_stream.server.retention import RetentionSweeper

pytestmark = pytest.mark.integration


async def count(bus: Bus, execution_id: str) -> int:
    info = await bus.js.stream_info("NOETL_EVENTS",
                                    subjects_filter=f"noetl.events.{execution_id}.>")
    return sum((info.state.subjects or {}).values())


async def test_events_without_a_state_go_after_the_retention(bus: Bus) -> None:
    kv = await bus.js.key_value("noetl_executions")
    await kv.put("kept1", jsonutil.dumps({"execution_id": "kept1", "playbook_key": "k",
                                          "status": "running", "started_at": 1.0}))
    for execution_id in ("kept1", "ghost1"):
        await bus.js.publish(f"noetl.events.{execution_id}.step.done", b"{}")
    sweeper = RetentionSweeper(bus, retention_s=1.0)
    await sweeper.sweep()
    assert await count(bus, "ghost1") == 1  # seen without a state just now: not yet
    await asyncio.sleep(1.2)
    await sweeper.sweep()
    assert await count(bus, "ghost1") == 0
    assert await count(bus, "kept1") == 1
