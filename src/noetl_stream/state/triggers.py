"""Triggers in KV `noetl_triggers`: one record per trigger under its name (document, state, where
its messages are read), written by `trigger apply/pause/resume/delete`, and `<name>.last`, the
last execution it started, written by the server that started it. Two keys, so an operator's
change and a fire never race for one revision.
"""

from __future__ import annotations

import contextlib
from typing import Literal

from nats.js import JetStreamContext
from nats.js.errors import KeyNotFoundError
from nats.js.kv import KeyValue
from pydantic import BaseModel, ConfigDict

from noetl_stream.state.kv_keys import bucket_keys
from noetl_stream.triggers.document import Trigger

TRIGGERS_BUCKET = "noetl_triggers"
LAST_SUFFIX = ".last"
# The latest nominal time a schedule fired that was handled: catch-up counts missed times from it.
MARK_SUFFIX = ".mark"

TriggerState = Literal["active", "paused"]


class MessageSource(BaseModel):
    """Where a subject trigger reads: the stream holding its subject and its durable there."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    stream: str
    consumer: str
    # Made for triggers (`NOETL_ON_<name>`: no stream held the subject); the last trigger reading
    # it deletes it.
    owns_stream: bool


class TriggerRecord(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    trigger: Trigger
    state: TriggerState = "active"
    applied_at: str
    source: MessageSource | None = None


class LastFire(BaseModel):
    """The last execution a trigger started."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    execution_id: str
    fired_at: str
    nominal_time: str | None = None  # schedules and `trigger fire`
    message: str | None = None  # subject triggers: `<stream>:<sequence>`
    next_fire: str | None = None  # the next time nats-server will fire, as it said


TriggerEventType = Literal["trigger.applied", "trigger.paused", "trigger.resumed",
                          "trigger.deleted", "trigger.fired", "trigger.failed",
                          "trigger.fire_requested", "trigger.backfill_requested",
                          "trigger.skipped"]


class TriggerEvent(BaseModel):
    """A change to a trigger, or what one fire did, on `<prefix>.triggers.events.<name>.<type>`
    (the type without its `trigger.` prefix).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    trigger: str
    event_type: TriggerEventType
    time: str
    revision: int | None = None  # of the KV record, for applied, paused, resumed
    state: TriggerState | None = None  # applied
    document: Trigger | None = None  # applied
    text: str | None = None  # applied: the document as written
    execution_id: str | None = None  # fired; failed: the one it would have started
    fired_at: str | None = None  # fired
    nominal_time: str | None = None  # fired by a schedule or `trigger fire`
    message: str | None = None  # fired by a message: `<stream>:<sequence>`
    next_fire: str | None = None  # fired by a schedule: the next fire time nats-server named
    reason: str | None = None  # failed, skipped
    from_time: str | None = None  # backfill_requested
    to_time: str | None = None  # backfill_requested
    count: int | None = None  # backfill_requested: the nominal times it sent


async def _bucket(js: JetStreamContext) -> KeyValue:
    return await js.key_value(TRIGGERS_BUCKET)


async def read_record(js: JetStreamContext, name: str) -> tuple[TriggerRecord, int] | None:
    """The record and its revision, or None."""
    kv = await _bucket(js)
    try:
        entry = await kv.get(name)
    except KeyNotFoundError:
        return None
    if not entry.value:
        return None
    return TriggerRecord.model_validate_json(entry.value), int(entry.revision or 0)


async def write_record(js: JetStreamContext, record: TriggerRecord) -> int:
    """Store the record; its new revision."""
    kv = await _bucket(js)
    return int(await kv.put(record.trigger.name, record.model_dump_json().encode()))


async def delete_record(js: JetStreamContext, name: str) -> None:
    kv = await _bucket(js)
    for key in (name, name + LAST_SUFFIX, name + MARK_SUFFIX):
        with contextlib.suppress(KeyNotFoundError):
            await kv.delete(key)


async def write_last(js: JetStreamContext, name: str, last: LastFire) -> None:
    kv = await _bucket(js)
    await kv.put(name + LAST_SUFFIX, last.model_dump_json().encode())


async def read_last(js: JetStreamContext, name: str) -> LastFire | None:
    kv = await _bucket(js)
    try:
        entry = await kv.get(name + LAST_SUFFIX)
    except KeyNotFoundError:
        return None
    return LastFire.model_validate_json(entry.value) if entry.value else None


async def trigger_names(js: JetStreamContext) -> list[str]:
    """Every trigger's name, sorted (a deleted one's key stays until compaction: read to check)."""
    return [k for k in await bucket_keys(js, TRIGGERS_BUCKET) if "." not in k]


async def read_mark(js: JetStreamContext, name: str) -> str | None:
    kv = await _bucket(js)
    try:
        entry = await kv.get(name + MARK_SUFFIX)
    except KeyNotFoundError:
        return None
    return entry.value.decode() if entry.value else None


async def write_mark(js: JetStreamContext, name: str, nominal: str) -> None:
    """Move the mark forward to `nominal` (never back: fires may be handled out of order)."""
    current = await read_mark(js, name)
    if current is None or current < nominal:
        kv = await _bucket(js)
        await kv.put(name + MARK_SUFFIX, nominal.encode())


async def clear_mark(js: JetStreamContext, name: str) -> None:
    """Forget the mark (apply, resume): a pause, or another schedule, is no missed time."""
    kv = await _bucket(js)
    with contextlib.suppress(KeyNotFoundError):
        await kv.delete(name + MARK_SUFFIX)
