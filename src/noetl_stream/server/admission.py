"""The admission service of the server processes: concurrency slots in KV `noetl_concurrency`.

The router says what it needs with two outbox events (router/admission.py):
`concurrency.requested` when an execution under a limit starts and `concurrency.released` when
it ends. This service reads both from one durable consumer on the events stream, in stream
order, so an execution is put in line in the order executions started, and a message is
acknowledged only once its change is written and its consequences published: a crash of any
process at any point is met by the redelivery. Each change is one revision-checked write of the
group's entry (state/concurrency_groups.py), so two servers never give away the same slot.

Consequences are messages on the executions' own subjects, which the router applies in order
with the rest of their events: `execution.admitted` (the start step fires), and
`execution.cancel.requested` for an execution refused by `on_limit: skip` or cut short by
`cancel_oldest`. Their msg ids are fixed per execution, so publishing one again is harmless.

A sweep (every SWEEP_S) reads each group and gives up the slots and places of executions that
ended or no longer exist (their release was lost, say, or purged with them), and tells the
holders that still wait that they may start.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from nats.aio.msg import Msg
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from noetl_stream import ids, jsonutil
from noetl_stream.bus.connection import Bus
from noetl_stream.bus.publish import publish_event
from noetl_stream.bus.pull import PullConsumer, open_pull
from noetl_stream.bus.signals import decode_event_body
from noetl_stream.messages import Malformed, event_body
from noetl_stream.router import admission
from noetl_stream.router.cancel import REQUESTED as CANCEL_REQUESTED
from noetl_stream.router.state import ExecutionState
from noetl_stream.server.retention import EXECUTIONS_BUCKET
from noetl_stream.state import concurrency_groups as groups
from noetl_stream.state.kv_keys import bucket_keys

log = logging.getLogger("noetl_stream.admission")

DURABLE = "noetl-server-admission"
BATCH = 32
WRITE_RETRIES = 50
SWEEP_S = 10.0
RETRY_DELAY_S = 1.0


class AdmissionService:
    def __init__(self, bus: Bus, *, clock: Callable[[], float], sweep_s: float = SWEEP_S) -> None:
        self.bus = bus
        self.clock = clock
        self.sweep_s = sweep_s
        self._kv: KeyValue | None = None
        self._executions: KeyValue | None = None
        self._consumer: PullConsumer | None = None
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        self._kv = await self.bus.js.key_value(groups.BUCKET)
        self._executions = await self.bus.js.key_value(EXECUTIONS_BUCKET)
        decl = self.bus.topology.consumer(DURABLE)
        self._consumer = await open_pull(self.bus, decl.stream, decl.durable, credit=BATCH)
        self._tasks = [asyncio.create_task(self._loop(self._consumer), name="admission"),
                       asyncio.create_task(self._sweep_loop(), name="admission-sweep")]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None

    # -- the requests and releases, in stream order ------------------------------------------
    async def _loop(self, consumer: PullConsumer) -> None:
        while True:
            msgs = await consumer.next_batch(BATCH)
            for msg in msgs:  # one at a time: the order of the line is the order of the stream
                try:
                    await self.handle(msg)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    # Never dropped (a lost request would wait forever, a lost release is only
                    # found by the sweep): it comes back, a second later, until it is handled.
                    log.warning("admission: %s not handled (%s); it comes back", msg.subject[:200],
                                exc)
                    with contextlib.suppress(Exception):
                        await msg.nak(delay=RETRY_DELAY_S)
            await consumer.grant(len(msgs))

    async def handle(self, msg: Msg) -> None:
        try:
            event = decode_event_body(self.bus.topology, msg.subject, msg.data)
        except Malformed as exc:
            log.warning("admission: %s refused: %s", msg.subject[:200], exc)
            await msg.term()
            return
        found = groups.fields_of(event)
        if found is None:
            await msg.term()
            return
        group, limit, on_limit = found
        execution_id = str(event["execution_id"])
        again = bool(msg.metadata.num_delivered and msg.metadata.num_delivered > 1)
        if event["event_type"] == admission.REQUESTED:
            await self._request(execution_id, group, limit, on_limit)
        elif event["event_type"] == admission.RELEASED:
            await self._release(execution_id, group, again)
        await msg.ack()

    async def _request(self, execution_id: str, group: str, limit: int, on_limit: str) -> None:
        record, out = await self._change(group, lambda r: groups.join(r, execution_id, limit,
                                                                      on_limit, self.clock()))
        if out.skipped:
            await self._cancel(execution_id, groups.skip_reason(group, limit, len(record.holders)))
        await self._publish(out)

    async def _release(self, execution_id: str, group: str, again: bool) -> None:
        record, out = await self._change(group, lambda r: groups.leave(r, execution_id,
                                                                       self.clock()))
        if again:  # the first delivery may have written and then died before telling them
            out.admitted = [h.id for h in record.holders]
        await self._publish(out)

    async def _change(self, group: str, change: Callable[[groups.GroupRecord], groups.Outcome]
                      ) -> tuple[groups.GroupRecord, groups.Outcome]:
        """Apply `change` to the group's entry with a revision-checked write (read again and
        retried when another server wrote in between).
        """
        assert self._kv is not None
        key = groups.key_of(group)
        for _ in range(WRITE_RETRIES):
            try:
                entry = await self._kv.get(key)
                record, revision = groups.decode(entry.value, group), int(entry.revision or 0)
            except KeyNotFoundError:
                record, revision = groups.GroupRecord(group=group), 0
            out = change(record)
            if not out.changed:
                return record, out
            try:
                if revision and not record.holders and not record.queue:
                    await self._kv.delete(key, last=revision)  # an idle group leaves no entry
                elif revision:
                    await self._kv.update(key, groups.encode(record), last=revision)
                else:
                    await self._kv.create(key, groups.encode(record))
            except KeyWrongLastSequenceError:
                continue
            return record, out
        raise RuntimeError(f"the slots of {group} kept changing under {WRITE_RETRIES} writes")

    async def _publish(self, out: groups.Outcome) -> None:
        for execution_id in out.admitted:
            await self._admitted(execution_id)
        for execution_id, reason in out.cancels.items():
            await self._cancel(execution_id, reason)

    async def _admitted(self, execution_id: str) -> None:
        msg_id = ids.event_msg_id(execution_id, admission.ADMITTED)
        await publish_event(self.bus, execution_id, admission.ADMITTED, msg_id,
                            event_body(admission.ADMITTED, execution_id, self.clock()))

    async def _cancel(self, execution_id: str, reason: str) -> None:
        msg_id = ids.event_msg_id(execution_id, CANCEL_REQUESTED)
        await publish_event(self.bus, execution_id, CANCEL_REQUESTED, msg_id,
                            event_body(CANCEL_REQUESTED, execution_id, self.clock(),
                                       reason=reason, requested_by="concurrency"))

    # -- the sweep -----------------------------------------------------------------------------
    async def _sweep_loop(self) -> None:
        while True:
            await asyncio.sleep(self.sweep_s)
            try:
                await self.sweep()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("admission sweep failed (%s); next one in %.0fs", exc, self.sweep_s)

    async def sweep(self) -> None:
        """Give up the slots and places of executions that ended or are gone; tell holders that
        still wait that they hold a slot.
        """
        assert self._kv is not None
        for key in await bucket_keys(self.bus.js, groups.BUCKET):
            try:
                entry = await self._kv.get(key)
            except KeyNotFoundError:
                continue
            record = groups.decode(entry.value, "")
            for execution_id in [h.id for h in record.holders] + [w.id for w in record.queue]:
                state = await self._state(execution_id)
                if state is None or state.status != "running":
                    log.info("admission sweep: %s has ended; its place in %s is given up",
                             execution_id, record.group)
                    await self._release(execution_id, record.group, False)
                elif admission.waiting(state) and record.holds(execution_id):
                    await self._admitted(execution_id)

    async def _state(self, execution_id: str) -> ExecutionState | None:
        assert self._executions is not None
        try:
            entry = await self._executions.get(execution_id)
        except KeyNotFoundError:
            return None
        if not entry.value:
            return None
        return ExecutionState.from_dict(jsonutil.loads(entry.value))


__all__ = ["AdmissionService"]
