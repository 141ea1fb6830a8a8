"""What one `trigger fire` came to: the execution a server started for it, or why none started.

The fire itself is a message a server reads later; without this the command would report
"fired" for a fire that starts nothing (a subject trigger whose payload reads `message`). The
outcome is the trigger's `fired` or `failed` event naming the execution id derived from
(trigger, nominal time), heard on a core subscription opened before the fire is sent.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import ValidationError

from noetl_stream import ids
from noetl_stream.server import trigger_ops
from noetl_stream.state.triggers import TriggerEvent

if TYPE_CHECKING:
    from nats.aio.msg import Msg

    from noetl_stream.bus.connection import Bus


@dataclass(frozen=True)
class FireOutcome:
    """`started` is None when no server answered within the wait."""

    nominal_time: str
    execution_id: str
    started: bool | None
    reason: str | None = None


async def fire_and_wait(bus: Bus, name: str, wait_s: float) -> FireOutcome:
    """Fire `name` once, now, and wait up to `wait_s` for a server to start or refuse it."""
    heard: asyncio.Queue[TriggerEvent] = asyncio.Queue()

    async def on_event(msg: Msg) -> None:
        with contextlib.suppress(ValidationError):  # an event of a newer release: not ours
            heard.put_nowait(TriggerEvent.model_validate_json(msg.data))

    subject = bus.topology.trigger_event_subject(name, "*")
    sub = await bus.nc.subscribe(subject, cb=on_event)
    try:
        nominal = await trigger_ops.fire(bus, name)
        execution_id = ids.derived_execution_id("trigger", name, nominal)
        return await _outcome(heard, nominal, execution_id, wait_s)
    finally:
        await sub.unsubscribe()


async def _outcome(heard: asyncio.Queue[TriggerEvent], nominal: str, execution_id: str,
                   wait_s: float) -> FireOutcome:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_s
    while (left := deadline - loop.time()) > 0:
        try:
            event = await asyncio.wait_for(heard.get(), left)
        except TimeoutError:
            break
        if event.execution_id != execution_id:
            continue
        if event.event_type == "trigger.fired":
            return FireOutcome(nominal, execution_id, started=True)
        if event.event_type == "trigger.failed":
            return FireOutcome(nominal, execution_id, started=False, reason=event.reason)
    return FireOutcome(nominal, execution_id, started=None)
