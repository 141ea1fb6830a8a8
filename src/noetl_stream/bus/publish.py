"""Publishing with deterministic `Nats-Msg-Id` headers: outbox messages, worker events.

Every event leaves through here, so this is where each gets the envelope fields any reader may
count on (noetl_stream/events.py): `event_id` (its msg id) and `time` (ISO-8601 UTC).
"""

from __future__ import annotations

import os
import random
from typing import Any

from noetl_stream import jsonutil
from noetl_stream.bus import wire
from noetl_stream.bus.connection import Bus
from noetl_stream.bus.stored_publish import Sent
from noetl_stream.bus.timers import timer_message
from noetl_stream.isotime import iso_time
from noetl_stream.jsonutil import JsonObject
from noetl_stream.router.state import Outgoing
from noetl_stream.subjects import ROUTER_INPUT_EVENTS

PUBLISH_ID_HEADER = "Noetl-Publish-Id"
# `first` on a command its committer publishes; absent on one published again (a state read
# cold, the stall check, an earlier release): such a copy may follow an earlier start of its
# attempt, which its worker looks for first (worker/attempt_claims.py).
PUBLISH_ROUND_HEADER = "Noetl-Publish"
FIRST_PUBLISH = "first"
# On `task.started`: which stored copy of the command the attempt's start belongs to.
COPY_HEADER = "Noetl-Copy"

# Publish ids are drawn from a generator seeded once from the OS (and again in a forked child),
# not with `secrets`: that is an `os.urandom` system call per outbox, one per step. An id only
# has to differ from every other publish's, which 64 random bits seeded this way do.
_publish_ids = random.Random(os.urandom(32))
os.register_at_fork(after_in_child=lambda: _publish_ids.seed(os.urandom(32)))


def new_publish_id() -> str:
    """A fresh `Noetl-Publish-Id`: 16 hex digits."""
    return f"{_publish_ids.getrandbits(64):016x}"


def stamp(body: JsonObject, msg_id: str) -> JsonObject:
    """`body` with `event_id` and `time` set where its producer left them out (in place: the
    fields follow from the body and its id, so stamping a body again changes nothing).
    """
    body.setdefault("event_id", msg_id)
    timestamp = body.get("timestamp")
    if isinstance(timestamp, (int, float)) and "time" not in body:
        body["time"] = iso_time(float(timestamp))
    return body


def subject_of(bus: Bus, message: Outgoing) -> str:
    if message.kind == "command":
        return bus.topology.command_subject(message.pool, message.tool_kind)
    if message.kind == "cancel":  # the router stopping a child execution (router/children.py)
        return bus.topology.cancel_request_subject()
    execution_id = str(message.plain_body["execution_id"])
    if message.pool and message.event_type in ROUTER_INPUT_EVENTS:  # server/pools.py
        return bus.topology.outcome_subject(execution_id, message.event_type, message.pool)
    return bus.topology.event_subject(execution_id, message.event_type)


async def publish_outbox(bus: Bus, outbox: list[Outgoing],
                         trace_headers: dict[str, str] | None = None, *, again: bool = False
                         ) -> None:
    """Publish every message and wait for JetStream to store each (duplicates are dropped).
    Commands also carry `trace_headers` (the execution's `traceparent`), when given, and,
    unless the outbox goes out `again` (a state read cold), the first publish's mark.
    """
    if not outbox:
        return
    # Every message is written to the connection in outbox order before any ack is waited for,
    # without a task per message: the command reaches nats-server in the turn of the event loop
    # that publishes it, and watchers see events in the order the router produced them.
    # Which publish a stored command came from: the same on every delivery of it (and after a
    # backup's restore), another on a copy published again (worker/attempt_claims.py).
    publish_id = new_publish_id()
    command_headers = {PUBLISH_ID_HEADER: publish_id, **(trace_headers or {})}
    if not again:
        command_headers[PUBLISH_ROUND_HEADER] = FIRST_PUBLISH
    sent: list[Sent] = []
    try:
        for m in outbox:
            if m.kind == "timer":
                sent.append(await bus.stored.send(*timer_message(bus, m)))
                continue
            data = jsonutil.dumps(stamp(m.plain_body, m.msg_id) if m.kind == "event" else m.body)
            headers = {"Nats-Msg-Id": m.msg_id}
            if m.kind == "command":
                headers.update(command_headers)
            if m.progress:
                await wire.publish(bus.nc, subject_of(bus, m), data, headers=headers)
            else:
                sent.append(await bus.stored.send(subject_of(bus, m), data, headers))
        for message in sent:
            await message.stored()
    finally:
        for message in sent:
            message.abandon()  # a write or an ack failed: the waits after it are not kept


async def publish_event(bus: Bus, execution_id: str, event_type: str, msg_id: str,
                        body: dict[str, Any], *, wait: bool = True, pool: str | None = None) -> None:
    """Publish a worker's (or the server's) event; an outcome names the `pool` that ran its
    command in its subject (subjects.outcome_subject).
    """
    topo = bus.topology
    subject = topo.event_subject(execution_id, event_type) if pool is None \
        else topo.outcome_subject(execution_id, event_type, pool)
    data = jsonutil.dumps(stamp(body, msg_id))
    headers = {"Nats-Msg-Id": msg_id}
    if wait:
        await bus.stored.publish(subject, data, headers)
    else:
        # Progress only: the stream still stores it, we just do not wait for the store's ack.
        await wire.publish(bus.nc, subject, data, headers=headers)
