"""Publishing with deterministic `Nats-Msg-Id` headers: outbox messages, worker events."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

from noetl_stream import jsonutil
from noetl_stream.router.state import Outgoing
from noetl_stream.runtime.connection import Bus
from noetl_stream.runtime.timers import publish_timer


def subject_of(bus: Bus, message: Outgoing) -> str:
    if message.kind == "command":
        return bus.topology.command_subject(message.pool, message.tool_kind)
    if message.kind == "cancel":  # the router stopping a child execution (router/children.py)
        return bus.topology.cancel_request_subject()
    return bus.topology.event_subject(str(message.body["execution_id"]), message.event_type)


async def publish_outbox(bus: Bus, outbox: list[Outgoing]) -> None:
    """Publish every message and wait for JetStream to store each (duplicates are dropped)."""
    if not outbox:
        return
    # Coroutines are started in outbox order and each writes its message first, so watchers see
    # events in the order the router produced them.
    sends: list[Awaitable[Any]] = []
    for m in outbox:
        if m.kind == "timer":
            sends.append(publish_timer(bus, m))
            continue
        data = jsonutil.dumps(m.body)
        headers = {"Nats-Msg-Id": m.msg_id}
        if m.progress:
            sends.append(bus.nc.publish(subject_of(bus, m), data, headers=headers))
        else:
            sends.append(bus.js.publish(subject_of(bus, m), data, headers=headers))
    await asyncio.gather(*sends)


async def publish_event(bus: Bus, execution_id: str, event_type: str, msg_id: str,
                        body: dict[str, Any], *, wait: bool = True) -> None:
    subject = bus.topology.event_subject(execution_id, event_type)
    data = jsonutil.dumps(body)
    headers = {"Nats-Msg-Id": msg_id}
    if wait:
        await bus.js.publish(subject, data, headers=headers)
    else:
        # Progress only: the stream still stores it, we just do not wait for the store's ack.
        await bus.nc.publish(subject, data, headers=headers)
