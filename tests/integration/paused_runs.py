"""An execution run until a step of it starts, its committed state read, and its services
stopped: what a test of a server that never saw the execution (a restart, another server) starts
from. The watch goes on; a test resumes the execution under new services and awaits it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from noetl_stream import jsonutil
from noetl_stream.bus.connection import Bus
from noetl_stream.jsonutil import JsonObject
from noetl_stream.services import run_services, submit_and_watch
from noetl_stream.testing.waiting import assert_eventually


async def committed_state(bus: Bus, execution_id: str) -> dict[str, Any]:
    """The execution's state as last committed to KV `noetl_executions`."""
    entry = await (await bus.js.key_value("noetl_executions")).get(execution_id)
    data: dict[str, Any] = jsonutil.loads(entry.value or b"{}")
    return data


async def run_until_started(bus: Bus, playbook_text: str, playbook_file: str, execution_id: str,
                            step: str) -> tuple[asyncio.Task[JsonObject], dict[str, Any]]:
    """Run the playbook until `step` starts; the watch of the execution and its committed state
    then, read before the services stop.
    """
    events: list[dict[str, Any]] = []
    async with run_services(bus, python_children=1):
        watch = asyncio.create_task(submit_and_watch(
            bus, playbook_text=playbook_text, playbook_file=playbook_file, payload={},
            on_event=events.append, execution_id=execution_id, timeout_s=60))

        def started() -> None:
            assert any(e["event_type"] == "step.started" and e.get("step") == step
                       for e in events)
        await assert_eventually(started)
        stored = await committed_state(bus, execution_id)
    return watch, stored
