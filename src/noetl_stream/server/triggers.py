"""The trigger service of the server processes: each fire and each matching message starts one
execution (docs/triggers.md).

* Fires arrive on `<prefix>.triggers.fire.<name>` through the durable `noetl-server-triggers`:
  produced by nats-server from a trigger's schedule message, or sent by `trigger fire`,
  `trigger backfill` and catch-up (server/trigger_catchup.py). The execution id is derived
  from (trigger, nominal fire time), the nominal time from what the message carries
  (server/trigger_ops.py, triggers/cron.py `nominal_time`), so a redelivered or repeated fire
  of one time starts one execution.
* A subject trigger's messages arrive through its own durable on the stream holding its subject;
  the execution id is derived from the trigger, that stream and the message's sequence, so a
  message is started once per trigger however often it is delivered (a server killed before
  its ack included). An event trigger reads the events stream the same way, one execution per
  (trigger, event id) (server/trigger_events.py).

The request goes out with `Nats-Msg-Id: req:<id>` and the server's request handling creates an
execution once per id (docs/architecture.md), so the id is the whole of "exactly once". The
fire is acknowledged after JetStream stored the request; `<name>.last` and the `fired` event
follow, and a crash between them leaves only those two behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime

from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeout

from noetl_stream import ids, jsonutil
from noetl_stream.bus.connection import Bus
from noetl_stream.bus.dispositions import classify, settle
from noetl_stream.bus.pull import PullConsumer, open_pull
from noetl_stream.bus.stopping import stop_task
from noetl_stream.dsl.templating import evaluate_guard
from noetl_stream.errors import NoetlStreamError
from noetl_stream.jsonutil import JsonValue
from noetl_stream.server.trigger_catchup import catch_up
from noetl_stream.server.trigger_events import (
    MessageContext,
    TriggerContext,
    event_context,
    event_execution_id,
)
from noetl_stream.server.trigger_ops import H_MANUAL, H_NOMINAL, publish_trigger_event
from noetl_stream.server.trigger_start import record_fired, request_execution
from noetl_stream.state import triggers as store
from noetl_stream.state.triggers import LastFire, TriggerRecord
from noetl_stream.triggers.cron import nominal_time

log = logging.getLogger("noetl_stream.triggers")

FIRE_CONSUMER = "noetl-server-triggers"
BATCH = 16
PAUSED_REDELIVERY_S = 2.0
WATCH_RETRY_S = 1.0


_RFC3339 = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|z|[+-]\d\d:\d\d)")


class FireRefused(NoetlStreamError, ValueError):
    """A fire that cannot start an execution (its playbook is gone, a template fails)."""


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _parse_time(text: str) -> datetime:
    """RFC 3339 as nats-server writes it (in the schedule's zone, with its offset, or `Z`;
    nanoseconds at most), as an aware UTC datetime.
    """
    match = _RFC3339.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"not an RFC 3339 time: {text!r}")
    head, fraction, zone = match.groups()
    zone = "+00:00" if zone in ("Z", "z") else zone
    return datetime.fromisoformat(f"{head}.{(fraction or '0')[:6]:0<6}{zone}").astimezone(UTC)


def fire_nominal(record: TriggerRecord, msg: Msg) -> tuple[str, str | None]:
    """(nominal time, next fire time as nats-server said) of a fire message."""
    headers = msg.headers or {}
    if (sent := headers.get(H_NOMINAL)) is not None:
        return sent, None
    schedule = record.trigger.spec.schedule
    nxt = headers.get("Nats-Schedule-Next")
    if schedule is None or nxt is None:
        raise FireRefused("a fire without a nominal time and not from a schedule")
    next_at = _parse_time(nxt)
    fired_at = msg.metadata.timestamp.astimezone(UTC)
    nominal = nominal_time(schedule.nats_schedule(), schedule.timezone, next_at, fired_at)
    return _iso(nominal), _iso(next_at)


def _stored_at(msg: Msg) -> str:
    return _iso(msg.metadata.timestamp)


def message_context(msg: Msg) -> MessageContext:
    raw = msg.data or b""
    try:
        data: JsonValue = jsonutil.loads(raw)
    except ValueError:
        data = raw.decode("utf-8", errors="replace")
    headers = {k: v for k, v in (msg.headers or {}).items()}
    return {"subject": msg.subject, "data": data, "headers": headers,
            "stream": msg.metadata.stream, "sequence": msg.metadata.sequence.stream}


class TriggerService:
    """Fires and subject triggers, on every server; several servers share the durables."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self._fires: PullConsumer | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._subject_loops: dict[str, tuple[asyncio.Task[None], PullConsumer]] = {}
        self._stopping = asyncio.Event()

    async def start(self) -> None:
        decl = self.bus.topology.consumer(FIRE_CONSUMER)
        self._fires = await open_pull(self.bus, decl.stream, decl.durable, credit=BATCH)
        self._tasks = [asyncio.create_task(self._loop(self._fires, self.handle_fire),
                                           name="trigger-fires"),
                       asyncio.create_task(self._watch(), name="trigger-watch")]

    async def stop(self) -> None:
        self._stopping.set()
        for task in self._tasks:
            await stop_task(task)
        for name in list(self._subject_loops):
            await self._stop_subject(name)
        if self._fires is not None:
            await self._fires.stop()

    async def _loop(self, consumer: PullConsumer,
                    handle: Callable[[Msg], Awaitable[None]]) -> None:
        while not self._stopping.is_set():
            msgs = await consumer.next_batch(BATCH)
            for m in msgs:
                try:
                    await handle(m)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    # NATS trouble hands the message back; a bug terminates it (dispositions.py).
                    failure = classify(exc)
                    log.exception("triggers: %s not handled (%s)", m.subject, failure)
                    await settle(m, failure)
            await consumer.grant(len(msgs))

    # -- the triggers in force: one reading loop per active subject trigger ----------------------
    async def _watch(self) -> None:
        """Follow KV `noetl_triggers`; a watcher lost to NATS trouble is opened again (its
        first entries are every trigger's current record, so nothing changed meanwhile is missed).
        """
        while not self._stopping.is_set():
            try:
                await self._follow()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("triggers: watching %s failed; watching again", store.TRIGGERS_BUCKET)
                await asyncio.sleep(WATCH_RETRY_S)

    async def _follow(self) -> None:
        kv = await self.bus.js.key_value(store.TRIGGERS_BUCKET)
        watcher = await kv.watchall()
        try:
            while not self._stopping.is_set():
                try:
                    entry = await watcher.updates(timeout=5)  # type: ignore[no-untyped-call]
                except (NatsTimeout, TimeoutError):
                    continue
                if entry is None or "." in entry.key:
                    continue
                record = (TriggerRecord.model_validate_json(entry.value)
                          if entry.value and entry.operation not in ("DEL", "PURGE") else None)
                await self._reconcile(entry.key, record)
        finally:
            with contextlib.suppress(Exception):
                await watcher.stop()  # type: ignore[no-untyped-call]

    async def _reconcile(self, name: str, record: TriggerRecord | None) -> None:
        running = self._subject_loops.get(name)
        wanted = (record is not None and record.state == "active" and record.source is not None)
        if running is not None and (not wanted or record is None or record.source is None
                                    or running[1].name != record.source.consumer):
            await self._stop_subject(name)
            running = None
        if wanted and running is None:
            assert record is not None and record.source is not None
            consumer = await open_pull(self.bus, record.source.stream, record.source.consumer,
                                       credit=BATCH)
            task = asyncio.create_task(self._loop(consumer, self.handle_message),
                                       name=f"trigger-{name}")
            self._subject_loops[name] = (task, consumer)

    async def _stop_subject(self, name: str) -> None:
        task, consumer = self._subject_loops.pop(name)
        await stop_task(task)
        await consumer.stop()  # what it held goes back, for its next reader

    # -- one fire, one message ----------------------------------------------------------------
    async def handle_fire(self, msg: Msg) -> None:
        name = msg.subject.rsplit(".", 1)[-1]
        found = await store.read_record(self.bus.js, name)
        manual = (msg.headers or {}).get(H_MANUAL) == "1"
        if found is None or (found[0].state != "active" and not manual):
            await msg.ack()  # deleted or paused since nats-server fired: nothing to start
            return
        record = found[0]
        try:
            nominal, next_fire = fire_nominal(record, msg)
        except (FireRefused, ValueError) as exc:
            await self._refused(name, f"fire:{msg.metadata.sequence.stream}", str(exc), msg)
            return
        if next_fire is not None:  # produced by the schedule: what it missed comes first
            starts = await catch_up(self.bus, record, nominal, msg.metadata.timestamp)
            await store.write_mark(self.bus.js, name, nominal)
            if not starts:
                await msg.ack()
                return
        execution_id = ids.derived_execution_id("trigger", name, nominal)
        context: dict[str, object] = {"trigger": self._trigger_context(record, msg, nominal)}
        await self._start(record, msg, execution_id, context,
                          LastFire(execution_id=execution_id, fired_at=_stored_at(msg),
                                   nominal_time=nominal, next_fire=next_fire))

    async def handle_message(self, msg: Msg) -> None:
        stream, seq = msg.metadata.stream, msg.metadata.sequence.stream
        name = msg.metadata.consumer.removeprefix("noetl-trigger-")
        found = await store.read_record(self.bus.js, name)
        if found is None or found[0].state != "active":
            # Paused (its loop is stopping): the message waits for resume, or a deleted
            # trigger's consumer goes with it.
            await msg.nak(delay=PAUSED_REDELIVERY_S)
            return
        record = found[0]
        on = record.trigger.spec.on
        message = message_context(msg)
        context: dict[str, object] = {"trigger": self._trigger_context(record, msg, None),
                                      "message": message}
        # The trigger is part of the id: two triggers reading one subject each start one.
        execution_id = ids.derived_execution_id("trigger-message", name, stream, str(seq))
        if on is not None and on.event is not None:
            event = await event_context(self.bus, on, record.trigger.spec.playbook, message)
            if event is None:
                await msg.ack()
                return
            context["event"] = event
            execution_id = event_execution_id(name, msg)
        try:
            wanted = on is None or evaluate_guard(on.when, context, field="on.when")
        except NoetlStreamError as exc:
            await self._refused(name, f"msg:{stream}:{seq}", f"on.when: {exc}", msg)
            return
        if not wanted:
            await msg.ack()
            return
        await self._start(record, msg, execution_id, context,
                          LastFire(execution_id=execution_id, fired_at=_stored_at(msg),
                                   message=f"{stream}:{seq}"))

    @staticmethod
    def _trigger_context(record: TriggerRecord, msg: Msg, nominal: str | None) -> TriggerContext:
        # The fire time is when JetStream stored the fire or message: every delivery of it
        # renders the same payload.
        return {"name": record.trigger.name, "playbook": record.trigger.spec.playbook,
                "fire_time": _stored_at(msg), "nominal_time": nominal}

    async def _start(self, record: TriggerRecord, msg: Msg, execution_id: str,
                     context: Mapping[str, object], last: LastFire) -> None:
        name = record.trigger.name
        refused = await request_execution(self.bus, record, execution_id, context)
        if refused is not None:
            await self._refused(name, execution_id, refused, msg, execution_id=execution_id)
            return
        await msg.ack()
        await record_fired(self.bus, name, last)

    async def _refused(self, name: str, key: str, reason: str, msg: Msg,
                       execution_id: str | None = None) -> None:
        """A fire that cannot start anything: said once as a `failed` event (naming the
        execution it would have started, which `trigger fire` waits for), then settled.
        """
        log.warning("trigger %s: fire not started: %s", name, reason)
        await publish_trigger_event(self.bus, name, "failed", f"trg:{name}:failed:{key}",
                                    reason=reason, execution_id=execution_id)
        await msg.ack()
