"""Triggers on the runtime's own events (`on: {event: execution.failed, playbook: etl/*}`).

The durable reads `<prefix>.events.*.<event>` on the events stream, so any event type the
runtime publishes under an execution's subject works (`execution.failed`, `sla.missed`, ...).
An event names its execution but not always the playbook: the playbook's catalog path is read
from the execution's committed state, which is stored before its events are published.

An event trigger never reacts to an execution of its own playbook: a notification playbook that
fails would otherwise start itself on its own failure, without end.
"""

from __future__ import annotations

import fnmatch
from typing import TypedDict

from nats.aio.msg import Msg
from nats.js.errors import KeyNotFoundError

from noetl_stream import ids, jsonutil
from noetl_stream.bus.connection import Bus
from noetl_stream.jsonutil import JsonObject, JsonValue
from noetl_stream.triggers.document import OnMessage

_DETAIL_FIELDS = ("status", "error", "result", "reason", "step", "duration_ms")


class TriggerContext(TypedDict):
    """What templates see as `trigger`: the trigger, its playbook and when it fired."""

    name: str
    playbook: str
    fire_time: str
    nominal_time: str | None


class MessageContext(TypedDict):
    """What templates see as `message`: a message a subject trigger read (its body decoded
    as JSON when it is JSON, else as text).
    """

    subject: str
    data: JsonValue
    headers: dict[str, str]
    stream: str
    sequence: int


async def execution_playbook(bus: Bus, execution_id: str) -> str | None:
    """The catalog path (`metadata.path`, else the name) of an execution, from its state."""
    kv = await bus.js.key_value("noetl_executions")
    try:
        entry = await kv.get(execution_id)
    except KeyNotFoundError:
        return None
    state = jsonutil.loads_object(entry.value or b"") or {}
    path = state.get("playbook_path") or state.get("playbook_name")
    return str(path) if path else None


async def event_context(bus: Bus, on: OnMessage, own_playbook: str,
                        message: MessageContext) -> JsonObject | None:
    """What templates see as `event`: type, execution id, playbook, error and the whole event;
    None when the event is not for this trigger (another playbook, or its own).
    """
    data = message["data"] if isinstance(message["data"], dict) else {}
    execution_id = str(data.get("execution_id") or message["subject"].split(".")[2])
    playbook = await execution_playbook(bus, execution_id)
    if playbook == own_playbook:
        return None
    if on.playbook is not None and (playbook is None or not fnmatch.fnmatchcase(playbook,
                                                                                on.playbook)):
        return None
    out: JsonObject = {"type": on.event, "execution_id": execution_id,
                           "playbook": playbook, "time": data.get("time"), "data": data}
    for key in _DETAIL_FIELDS:
        out.setdefault(key, data.get(key))
    return out


def event_execution_id(trigger: str, msg: Msg) -> str:
    """One execution per (trigger, event): the event's id, its stream sequence without one."""
    data = jsonutil.loads_object(msg.data or b"") or {}
    event_id = data.get("event_id")
    key = str(event_id) if event_id else f"{msg.metadata.stream}:{msg.metadata.sequence.stream}"
    return ids.derived_execution_id("trigger-event", trigger, key)
