"""Following one execution's events live, as `nats sub 'noetl.events.<id>.>'` would.

Reads through `EventFeed` (bus/event_feed.py): a consumer we name ourselves, re-created from
the last sequence seen when it is lost, so each event reaches `on_event` once and in order.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import timedelta

from nats.aio.msg import Msg

from noetl_stream.bus.connection import Bus
from noetl_stream.bus.delivery import pending_of
from noetl_stream.bus.event_feed import IDLE_HEARTBEAT, EventFeed
from noetl_stream.bus.signals import decode_event_body
from noetl_stream.jsonutil import JsonObject
from noetl_stream.subjects import TERMINAL_EXECUTION_EVENTS

log = logging.getLogger("noetl_stream.watch")

END_EVENTS = (*TERMINAL_EXECUTION_EVENTS, "execution.rejected")
RESTARTED = "execution.restarted"
RESTART_REQUESTED = "execution.restart.requested"


class EndOfLog:
    """Which end event of a log read from its start is the execution's end. A restart
    (`execution.restarted`) reopens an ended execution, so an end is the end only once the
    reader has caught up (the stream has nothing more of it) with no restart after it, and no
    restart asked for after it that the router has not answered yet.
    """

    def __init__(self) -> None:
        self.end: JsonObject | None = None
        self.reopening = False  # a restart was asked for after the end: not applied or refused yet

    def see(self, event: JsonObject, pending: int | None) -> JsonObject | None:
        """Take the next event (`pending`: messages still to come, None when unknown); the end
        event once it is known to be the last one.
        """
        etype = event.get("event_type")
        if etype == RESTARTED:
            self.end, self.reopening = None, False
        elif etype == RESTART_REQUESTED:
            self.reopening = self.end is not None
        elif etype == "event.ignored" and event.get("ignored") == RESTART_REQUESTED:
            self.reopening = False
        elif etype in END_EVENTS:
            self.end = event
        return self.end if self.end is not None and not self.reopening and not pending else None


class ExecutionWatch:
    """Delivers every event of an execution, from its first, to `on_event`; `wait()` returns the
    terminal event (the last one, for an execution restarted after an earlier end).
    """

    def __init__(self, bus: Bus, execution_id: str,
                 on_event: Callable[[JsonObject], None] | None = None, *,
                 idle_heartbeat: timedelta = IDLE_HEARTBEAT) -> None:
        self.bus = bus
        self.execution_id = execution_id
        self.on_event = on_event
        self._final: asyncio.Future[JsonObject] = asyncio.get_running_loop().create_future()
        self._end = EndOfLog()
        self.feed = EventFeed(bus.nc, bus.topology.execution_events_filter(execution_id),
                              on_msg=self._on_msg, idle_heartbeat=idle_heartbeat)

    async def start(self) -> None:
        await self.feed.start()

    async def _on_msg(self, msg: Msg) -> None:
        try:
            # A signal's body is a client's data, not an event envelope (bus/signals.py).
            event = decode_event_body(self.bus.topology, msg.subject, msg.data)
        except ValueError:
            return
        try:
            if self.on_event is not None:
                self.on_event(event)
        except Exception:
            # Showing progress must never stop us from seeing the end (a closed pipe, say).
            log.debug("watch: on_event failed", exc_info=True)
        end = self._end.see(event, pending_of(msg))
        if end is not None and not self._final.done():
            self._final.set_result(end)

    def ended(self) -> JsonObject | None:
        """The end event once it has come (see `EndOfLog`), else None."""
        return self._final.result() if self._final.done() else None

    async def wait(self, timeout_s: float | None = None) -> JsonObject:
        return await asyncio.wait_for(asyncio.shield(self._final), timeout_s)

    async def stop(self) -> None:
        await self.feed.stop()
