"""Operating triggers: apply, pause, resume, fire, delete and list (`noetl-stream trigger ...`).

A schedule is one message on `<prefix>.triggers.schedule.<name>` carrying `Nats-Schedule` (and
`Nats-Schedule-Time-Zone`), kept by `NOETL_TRIGGERS` with `Nats-TTL: never`; nats-server fires it
into `<prefix>.triggers.fire.<name>` for as long as it is the last message on its subject. A
message without `Nats-Schedule` on that subject (a pause, a delete) ends the schedule there and
then (nats-server drops the schedule of a subject whose new message is not one), and only the
subject's last message is kept, so a restarted nats-server finds only what is in force.

A subject trigger reads the stream that holds its subject (one is created for it when none does)
through a durable consumer of its own, created here, so messages published while no server runs
wait in it. Each change is recorded in KV first, then published as an event on
`<prefix>.triggers.events.<name>.<type>`.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, RetentionPolicy, StorageType, StreamConfig
from nats.js.errors import BadRequestError, KeyNotFoundError, NotFoundError

from noetl_stream import config, jsonutil
from noetl_stream.bus.connection import Bus
from noetl_stream.errors import CatalogError, NoetlStreamError
from noetl_stream.isotime import iso_time
from noetl_stream.jsonutil import JsonObject
from noetl_stream.state import triggers as store
from noetl_stream.state.catalog import read_path
from noetl_stream.state.triggers import MessageSource, TriggerEvent, TriggerRecord, TriggerState
from noetl_stream.triggers.catch_up import instants
from noetl_stream.triggers.cron import Cron, ScheduleError
from noetl_stream.triggers.document import Trigger

TRIGGERS_STREAM = "NOETL_TRIGGERS"
H_NOMINAL = "Noetl-Trigger-Nominal"  # a fire `trigger fire` sends: its nominal time
H_MANUAL = "Noetl-Trigger-Manual"  # sent by an operator: fires a paused trigger too
MESSAGE_ACK_WAIT_S = 30
MESSAGE_MAX_DELIVER = 10


class TriggerNotFound(NoetlStreamError, LookupError):
    """No trigger of that name."""


class ScheduleRefused(NoetlStreamError, ValueError):
    """nats-server does not take the schedule (an older server)."""


def consumer_name(trigger: str) -> str:
    return f"noetl-trigger-{trigger}"


def _now_iso() -> str:
    return iso_time(time.time())


async def publish_trigger_event(bus: Bus, name: str, event_type: str, msg_id: str,
                                **fields: object) -> None:
    event = TriggerEvent.model_validate({"trigger": name, "event_type": f"trigger.{event_type}",
                                         "time": _now_iso(), **fields})
    await bus.js.publish(bus.topology.trigger_event_subject(name, event_type),
                         event.model_dump_json(exclude_none=True).encode(),
                         headers={"Nats-Msg-Id": msg_id})


async def _set_schedule(bus: Bus, record: TriggerRecord, revision: int) -> None:
    """Publish the schedule in force (or the mark that ends it), then keep only that message."""
    name = record.trigger.name
    subject = bus.topology.trigger_schedule_subject(name)
    schedule = record.trigger.spec.schedule
    headers = {"Nats-Msg-Id": f"trgsched:{name}:{revision}", "Nats-TTL": "never"}
    if schedule is not None and record.state == "active":
        headers |= {"Nats-Schedule": schedule.nats_schedule(),
                    "Nats-Schedule-Target": bus.topology.trigger_fire_subject(name)}
        if schedule.timezone is not None:
            headers["Nats-Schedule-Time-Zone"] = schedule.timezone
        body: JsonObject = {"trigger": name}
    else:
        body = {"trigger": name, "schedule": None, "state": record.state}
    try:
        await bus.js.publish(subject, jsonutil.dumps(body), headers=headers)
    except BadRequestError as exc:
        # nats-server 2.12 and 2.13 know `@at` only: they refuse `@every`, cron and time zones.
        version = bus.nc.connected_server_version
        raise ScheduleRefused(
            f"nats-server {version} refused the schedule of {name} ({exc.description}): "
            "@every, cron and time zones need nats-server 2.14 or later") from exc
    await bus.js.purge_stream(TRIGGERS_STREAM, subject=subject, keep=1)


async def _end_schedule(bus: Bus, name: str, revision: int) -> None:
    subject = bus.topology.trigger_schedule_subject(name)
    await bus.js.publish(subject, jsonutil.dumps({"trigger": name, "schedule": None}),
                         headers={"Nats-Msg-Id": f"trgsched:{name}:deleted:{revision}"})
    await bus.js.purge_stream(TRIGGERS_STREAM, subject=subject)


MADE_STREAM_PREFIX = "NOETL_ON_"


def _stream_for_subject(trigger: str) -> str:
    return f"{MADE_STREAM_PREFIX}{trigger}"


EVENTS_STREAM = "NOETL_EVENTS"


def watched_subject(bus: Bus, trigger: Trigger) -> str | None:
    """The subject a trigger's durable reads: its `on.subject`, or for `on.event` that event
    type of every execution on the events stream; None for other sources.
    """
    on = trigger.spec.on
    if on is None:
        return None
    if on.event is not None:
        return f"{bus.topology.prefix}.events.*.{on.event}"
    return on.subject


async def _message_source(bus: Bus, trigger: Trigger, old: MessageSource | None,
                          old_subject: str | None) -> MessageSource | None:
    """The stream and durable a subject or event trigger reads, created when missing; the old
    ones go when the subject changed or the trigger no longer reads one.
    """
    subject = watched_subject(bus, trigger)
    if old is not None and subject != old_subject:
        await _drop_source(bus, old)
        old = None
    if subject is None:
        return None
    if old is not None:
        return old
    if trigger.spec.on is not None and trigger.spec.on.event is not None:
        stream, owns = EVENTS_STREAM, False
    else:
        stream, owns = await _subject_stream(bus, trigger.name, subject)
    durable = consumer_name(trigger.name)
    await bus.js.add_consumer(stream, ConsumerConfig(
        durable_name=durable, filter_subject=subject, ack_policy=AckPolicy.EXPLICIT,
        deliver_policy=DeliverPolicy.NEW, ack_wait=_message_ack_wait_s(),
        max_deliver=MESSAGE_MAX_DELIVER))
    return MessageSource(stream=stream, consumer=durable, owns_stream=owns)


async def _subject_stream(bus: Bus, name: str, subject: str) -> tuple[str, bool]:
    """The stream that stores `subject`, made for the trigger when none does; (its name,
    whether triggers own it).
    """
    try:
        stream = await bus.js.find_stream_name_by_subject(subject)
        owns = stream.startswith(MADE_STREAM_PREFIX)  # made for another trigger: shared
    except NotFoundError:
        stream, owns = _stream_for_subject(name), True
        await bus.js.add_stream(StreamConfig(
            name=stream, subjects=[subject], retention=RetentionPolicy.LIMITS,
            storage=StorageType.FILE, max_age=_retention_s()))
    return stream, owns


def _message_ack_wait_s() -> float:
    # The servers' other consumers follow NOETL_STREAM_ROUTER_ACK_WAIT_S too.
    return float(config.router_ack_wait_override() or MESSAGE_ACK_WAIT_S)


def _retention_s() -> float:
    return float(config.retention_s())


async def _drop_source(bus: Bus, source: MessageSource) -> None:
    """Delete the trigger's durable, and the stream made for it unless another trigger on the
    same subject reads it too.
    """
    try:
        await bus.js.delete_consumer(source.stream, source.consumer)
        if source.owns_stream and not await bus.js.consumers_info(source.stream):
            await bus.js.delete_stream(source.stream)
    except NotFoundError:
        pass


async def apply(bus: Bus, trigger: Trigger, text: str) -> tuple[TriggerRecord, bool]:
    """Store `trigger` (a new one starts active; an existing one keeps its state) and put its
    source in force; (the record, whether it was new). CatalogError when its playbook is not
    registered.
    """
    spec = trigger.spec
    if await read_path(bus.js, spec.playbook, spec.version) is None:
        version = f" version {spec.version}" if spec.version else ""
        raise CatalogError(f"no playbook is registered under {spec.playbook}{version} "
                           "(`noetl-stream register FILE` registers one)")
    found = await store.read_record(bus.js, trigger.name)
    old = found[0] if found else None
    old_subject = watched_subject(bus, old.trigger) if old else None
    source = await _message_source(bus, trigger, old.source if old else None, old_subject)
    record = TriggerRecord(trigger=trigger, state=old.state if old else "active",
                           applied_at=_now_iso(), source=source)
    revision = await store.write_record(bus.js, record)
    await store.clear_mark(bus.js, trigger.name)
    if spec.schedule is not None or (old and old.trigger.spec.schedule is not None):
        await _set_schedule(bus, record, revision)
    await publish_trigger_event(bus, trigger.name, "applied", f"trg:{trigger.name}:applied:{revision}",
                                revision=revision, state=record.state, document=trigger, text=text)
    return record, old is None


async def _require(bus: Bus, name: str) -> tuple[TriggerRecord, int]:
    """The record and its revision."""
    found = await store.read_record(bus.js, name)
    if found is None:
        raise TriggerNotFound(f"no trigger named {name} (`noetl-stream trigger list` shows them)")
    return found


async def set_state(bus: Bus, name: str, state: TriggerState) -> bool:
    """Pause or resume; False when it already was in that state."""
    record, revision = await _require(bus, name)
    if record.state == state:
        # Put the schedule in force again: a pause or resume that died between its KV write
        # and its schedule message is finished by asking again (the same message id).
        if record.trigger.spec.schedule is not None:
            await _set_schedule(bus, record, revision)
        return False
    record = record.model_copy(update={"state": state})
    revision = await store.write_record(bus.js, record)
    if state == "active":
        await store.clear_mark(bus.js, name)
    if record.trigger.spec.schedule is not None:
        await _set_schedule(bus, record, revision)
    event = "paused" if state == "paused" else "resumed"
    await publish_trigger_event(bus, name, event, f"trg:{name}:{event}:{revision}",
                                revision=revision)
    return True


def iso_ms(moment: datetime) -> str:
    """A nominal time as triggers write it: RFC 3339, UTC, milliseconds, `Z`."""
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


async def send_fire(bus: Bus, name: str, nominal: str, *, manual: bool = True) -> None:
    """One fire of `nominal` on the trigger's fire subject: its id is the nominal time, so a
    second fire of the same time within the duplicate window is dropped by the stream, and
    any later one starts nothing new (the execution id is derived from the same two).
    """
    headers = {"Nats-Msg-Id": f"trgfire:{name}:{nominal}", H_NOMINAL: nominal}
    if manual:
        headers[H_MANUAL] = "1"
    await bus.js.publish(bus.topology.trigger_fire_subject(name),
                         jsonutil.dumps({"trigger": name}), headers=headers)


async def fire(bus: Bus, name: str) -> str:
    """Fire once, now (a paused trigger too); the nominal time sent."""
    await _require(bus, name)
    nominal = iso_ms(datetime.now(UTC))
    await publish_trigger_event(bus, name, "fire_requested", f"trg:{name}:firereq:{nominal}",
                                nominal_time=nominal)
    await send_fire(bus, name, nominal)
    return nominal


async def backfill(bus: Bus, name: str, start: datetime, end: datetime) -> list[str]:
    """One fire per instant of the trigger's schedule in [start, end] (a paused trigger too);
    the nominal times sent. ScheduleError when it has no schedule or the range is too long.
    """
    record, _ = await _require(bus, name)
    schedule = record.trigger.spec.schedule
    if schedule is None:
        raise ScheduleError(f"trigger {name} has no schedule to backfill")
    if end < start:
        raise ScheduleError("the range ends before it starts (--to is before --from)")
    times = [iso_ms(t) for t in instants(schedule, start, end)]
    await publish_trigger_event(
        bus, name, "backfill_requested",
        f"trg:{name}:backfill:{iso_ms(start)}:{iso_ms(end)}:{_now_iso()}",
        from_time=iso_ms(start), to_time=iso_ms(end), count=len(times))
    for nominal in times:
        await send_fire(bus, name, nominal)
    return times


async def delete(bus: Bus, name: str) -> None:
    # The ids name the record's last revision: deleting the same trigger twice is one deletion.
    record, revision = await _require(bus, name)
    if record.trigger.spec.schedule is not None:
        await _end_schedule(bus, name, revision)
    if record.source is not None:
        await _drop_source(bus, record.source)
    await store.delete_record(bus.js, name)
    await publish_trigger_event(bus, name, "deleted", f"trg:{name}:deleted:{revision}",
                                revision=revision)


async def listing(bus: Bus) -> list[JsonObject]:
    """Every trigger: name, source, playbook, state, next fire time (when known), last execution."""
    out = []
    for name in await store.trigger_names(bus.js):
        found = await store.read_record(bus.js, name)
        if found is not None:
            out.append(await summary(bus, found[0]))
    return out


async def summary(bus: Bus, record: TriggerRecord) -> JsonObject:
    """What `list` shows of one trigger."""
    name = record.trigger.name
    last = await store.read_last(bus.js, name)
    return {"name": name, "state": record.state, "playbook": record.trigger.spec.playbook,
            "source": describe_source(record.trigger),
            "next_fire": _next_fire(record) or (
                last.next_fire if last and record.state == "active" else None),
            "last_execution": ({**last.model_dump(mode="json"),
                                "status": await _status(bus, last.execution_id)}
                               if last else None)}


async def detail(bus: Bus, name: str, upcoming: int = 5) -> JsonObject:
    """One trigger: its summary, document, applied time and its next `upcoming` fire times."""
    record, revision = await _require(bus, name)
    return {**await summary(bus, record), "revision": revision, "applied_at": record.applied_at,
            "document": record.trigger.model_dump(mode="json", exclude_none=True),
            "next_fires": [*next_fires(record, upcoming)]}


def next_fires(record: TriggerRecord, count: int) -> list[str]:
    """The next `count` fire times of an active cron schedule (an interval's depend on its
    previous fire, which nats-server keeps: see `next_fire`).
    """
    schedule = record.trigger.spec.schedule
    if record.state != "active" or schedule is None or schedule.cron is None:
        return []
    cron = Cron.parse(schedule.cron, schedule.timezone)
    out, t = [], datetime.now(UTC)
    for _ in range(count):
        t = cron.next_fire(t)
        out.append(t.isoformat().replace("+00:00", "Z"))  # as `next_fire` writes it
    return out


async def _status(bus: Bus, execution_id: str) -> str | None:
    """The execution's status as its committed state says; None when it has none (its request
    is not handled yet, or retention removed it).
    """
    kv = await bus.js.key_value("noetl_executions")
    try:
        entry = await kv.get(execution_id)
    except KeyNotFoundError:
        return None
    state = jsonutil.loads_object(entry.value or b"")
    return str(state.get("status", "running")) if state is not None else None


def describe_source(trigger: Trigger) -> str:
    spec = trigger.spec
    if spec.schedule is not None:
        s = spec.schedule
        return f"every {s.every}" if s.every else f"cron {s.cron} ({s.timezone or 'UTC'})"
    if spec.on is not None:
        return f"on event {spec.on.event}" + (f" of {spec.on.playbook}" if spec.on.playbook
                                              else "") if spec.on.event else f"on {spec.on.subject}"
    assert spec.webhook is not None
    return f"webhook /api/hooks/{trigger.name}"


def _next_fire(record: TriggerRecord) -> str | None:
    """The next time nats-server fires a cron schedule, computed as it does; for an interval,
    unknown here (it counts from the previous fire, whose message said when the next one is).
    """
    schedule = record.trigger.spec.schedule
    if record.state != "active" or schedule is None or schedule.cron is None:
        return None
    cron = Cron.parse(schedule.cron, schedule.timezone)
    return cron.next_fire(datetime.now(UTC)).isoformat().replace("+00:00", "Z")
