"""Following one execution's events live, as `nats sub 'noetl.events.<id>.>'` would.

Reads through `EventFeed` (runtime/event_feed.py): a consumer we name ourselves, re-created from
the last sequence seen when it is lost, so each event reaches `on_event` once and in order.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from nats.aio.msg import Msg

from noetl_stream.runtime.connection import Bus
from noetl_stream.runtime.event_feed import IDLE_HEARTBEAT, EventFeed
from noetl_stream.runtime.signals import decode_event
from noetl_stream.subjects import TERMINAL_EXECUTION_EVENTS

log = logging.getLogger("noetl_stream.watch")

END_EVENTS = (*TERMINAL_EXECUTION_EVENTS, "execution.rejected")


class ExecutionWatch:
    """Delivers every event of an execution, from its first, to `on_event`; `wait()` returns the
    terminal event.
    """

    def __init__(self, bus: Bus, execution_id: str,
                 on_event: Callable[[dict[str, Any]], None] | None = None, *,
                 idle_heartbeat: timedelta = IDLE_HEARTBEAT) -> None:
        self.bus = bus
        self.execution_id = execution_id
        self.on_event = on_event
        self._final: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.feed = EventFeed(bus.nc, bus.topology.execution_events_filter(execution_id),
                              on_msg=self._on_msg, idle_heartbeat=idle_heartbeat)

    async def start(self) -> None:
        await self.feed.start()

    async def _on_msg(self, msg: Msg) -> None:
        try:
            # A signal's body is a client's data, not an event envelope (runtime/signals.py).
            event = decode_event(self.bus.topology, msg.subject, msg.data)
        except ValueError:
            return
        try:
            if self.on_event is not None:
                self.on_event(event)
        except Exception:
            # Showing progress must never stop us from seeing the end (a closed pipe, say).
            log.debug("watch: on_event failed", exc_info=True)
        if event["event_type"] in END_EVENTS and not self._final.done():
            self._final.set_result(event)

    async def wait(self, timeout_s: float | None = None) -> dict[str, Any]:
        return await asyncio.wait_for(asyncio.shield(self._final), timeout_s)

    async def stop(self) -> None:
        await self.feed.stop()
