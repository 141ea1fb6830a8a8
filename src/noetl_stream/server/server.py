"""The server: JetStream glue around the pure router (ARCHITECTURE §6.2).

Per event batch of one execution: load state -> apply each event (pure) -> commit the new state
with its outbox by revision-checked KV update (retry on conflict) -> publish the outbox with
deterministic msg ids -> mark the outbox published -> ack. A state loaded fresh from KV whose
outbox is not marked has it re-published first, so a crash between commit and publish loses
nothing, and a copy can never run a command twice (server/outbox_marks.py).

Start and cancel requests are handled by server/execution_starts.py; the states and playbooks
held between events are server/execution_cache.py; a message a handler fails on is settled by
server/message_failures.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

from nats.aio.msg import Msg
from nats.js.errors import KeyWrongLastSequenceError

from noetl_stream import jsonutil, router
from noetl_stream.bus.connection import Bus
from noetl_stream.bus.delivery import renew_leases
from noetl_stream.bus.dispositions import Failure, settle
from noetl_stream.bus.pull import PullConsumer, open_pull
from noetl_stream.bus.storage import while_storage_refused
from noetl_stream.dsl import template_budget
from noetl_stream.dsl.models import Playbook
from noetl_stream.messages import Malformed
from noetl_stream.observe import tracing
from noetl_stream.observe.metrics import COMMIT_CONFLICTS
from noetl_stream.router.state import ExecutionState
from noetl_stream.router_events import RouterEvent
from noetl_stream.server import render_pool
from noetl_stream.server.event_groups import by_execution
from noetl_stream.server.execution_cache import STATE_CACHE_SIZE, ExecutionCache
from noetl_stream.server.execution_metrics import count_execution
from noetl_stream.server.execution_starts import ExecutionStarts
from noetl_stream.server.message_failures import handler_failed, refuse_event
from noetl_stream.server.nats_clock import NatsClock
from noetl_stream.server.outbox_marks import OutboxMarks
from noetl_stream.server.partitions import BATCH as PARTITION_BATCH
from noetl_stream.server.partitions import RouterPartitions
from noetl_stream.server.playbook_parsing import PLAYBOOK_CACHE_SIZE
from noetl_stream.server.pools import KnownPools
from noetl_stream.server.retention import EXECUTIONS_BUCKET
from noetl_stream.server.source_copies import fresh_items
from noetl_stream.server.state_codec import StateCodec, fault
from noetl_stream.server.vars_store import VarsStore
from noetl_stream.server.versions import Cached, named_versions, playbook_for, readable_versions
from noetl_stream.state.results import ResultStore
from noetl_stream.state.step_results import StepResults

log = logging.getLogger("noetl_stream.server")

REQUEST_BATCH = 64
COMMIT_RETRIES = 20
# Re-exported: the sizes of the server's caches (server/execution_cache.py).
__all__ = ["PLAYBOOK_CACHE_SIZE", "STATE_CACHE_SIZE", "Server"]


class Server:
    def __init__(self, bus: Bus, *, clock: Callable[[], float] | None = None) -> None:
        self.bus = bus
        # Timers fire on nats-server's clock (message schedules), so `now` is read on it too.
        self._nats_clock = NatsClock(bus, bus.topology.consumer("noetl-server-requests").stream) \
            if clock is None else None
        self.clock: Callable[[], float] = clock or self._nats_clock or time.time
        self._tasks: list[asyncio.Task[None]] = []
        # Event groups being applied; by execution, the one being applied and the events that
        # came for it meanwhile (applied together once it ends).
        self._groups: set[asyncio.Task[None]] = set()
        self._applying: dict[str, asyncio.Task[None]] = {}
        self._waiting: dict[str, list[tuple[Msg, Any]]] = {}
        self._consumers: list[PullConsumer] = []
        self._partitions: RouterPartitions | None = None
        self._stopping = asyncio.Event()
        self._vars = VarsStore(bus.js)
        self._pools = KnownPools(bus)
        self._results = ResultStore(bus.js)
        self._step_results = StepResults(bus.js, self._results, publish=bus.stored.publish)
        self._codec = StateCodec(bus.nc, self._results, self._step_results)
        self._marks = OutboxMarks(bus)  # which committed outbox went out (outbox_marks.py)
        self._renders = render_pool.RenderPool()  # where long template renders run
        self._cache = ExecutionCache(bus, self._step_results, self._marks)
        self._starts = ExecutionStarts(bus, self._cache, clock=self.clock, codec=self._codec,
                                       pools=self._pools, marks=self._marks,
                                       step_results=self._step_results, renders=self._renders)

    async def start(self) -> None:
        # A render in the applying thread lets the event loop (and other applies) in between.
        template_budget.pause_between_operations(os.sched_yield)
        if self._nats_clock is not None:
            await self._nats_clock.first_sync()
        await self._cache.open()
        topo = self.bus.topology
        req = topo.consumer("noetl-server-requests")
        requests = await open_pull(self.bus, req.stream, req.durable, credit=REQUEST_BATCH)
        # Events come per partition of the router's stream, each pinned to one server at a time
        # (server/partitions.py); one loop per partition's durable.
        self._partitions = RouterPartitions(self.bus, on_pinned=self._cache.forget_partition,
                                            clock=self.clock)
        partitions = await self._partitions.start()
        self._consumers = [requests]
        self._tasks = [
            asyncio.create_task(self._loop(requests, REQUEST_BATCH, self._starts.handle_requests),
                                name="requests"),
            *(asyncio.create_task(self._event_loop(events), name=f"router-{n}")
              for n, events in enumerate(partitions))]
        if self._nats_clock is not None:
            self._tasks.append(asyncio.create_task(self._nats_clock.keep_in_sync(),
                                                   name="nats-clock"))

    async def stop(self) -> None:
        self._stopping.set()
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        # Groups cut short are not acknowledged: their events come back to whoever goes on.
        for t in list(self._groups):
            t.cancel()
        for t in list(self._groups):
            with contextlib.suppress(asyncio.CancelledError):
                await t
        for consumer in self._consumers:
            await consumer.stop()
        self._consumers = []
        if self._partitions is not None:
            await self._partitions.stop()
            self._partitions = None
        await self._renders.stop()

    async def _loop(self, consumer: PullConsumer, batch: int,
                    handler: Callable[[list[Msg]], Awaitable[None]]) -> None:
        # One loop per consumer (several loops on one durable stall, ARCHITECTURE §10).
        while not self._stopping.is_set():
            msgs = await consumer.next_batch(batch)
            if not msgs:
                continue
            try:
                await handler(msgs)
            except asyncio.CancelledError:
                raise
            except Exception:
                # The consumer boundary: one bad batch must not stop the server. Unacked messages
                # are redelivered after AckWait and retried; poison ones hit max_deliver.
                log.exception("server: batch failed; its messages will be redelivered")
                await asyncio.sleep(0.2)
            finally:
                await consumer.grant(len(msgs))

    # -- events ----------------------------------------------------------------------------
    async def _event_loop(self, consumer: PullConsumer) -> None:
        """The events of one partition. Each execution's events are applied in the order they
        came, one group after the other, but no execution waits for another's commit: a batch
        is handed to the executions' groups and the next batch is taken at once. Events that
        come while their execution's group is being applied wait and form its next group, so
        a busy execution still commits many events at once. Credit comes back as each group
        ends, so the partition's credit still bounds the events in hand.
        """
        while not self._stopping.is_set():
            msgs = await consumer.next_batch(PARTITION_BATCH)
            here: tuple[str, list[tuple[Msg, Any]]] | None = None
            for execution_id, items in by_execution(self.bus.topology, msgs).items():
                if execution_id in self._applying:
                    self._waiting.setdefault(execution_id, []).extend(items)
                elif here is None and execution_id:
                    here = (execution_id, items)
                else:
                    self._start_group(execution_id, items, consumer)
            if here is not None:
                await self._apply_here(*here, consumer)
                return

    async def _apply_here(self, execution_id: str, items: list[tuple[Msg, Any]],
                          consumer: PullConsumer) -> None:
        """A batch's first group, applied in the task that took it: a task of its own would start
        a turn of the event loop later. A new task takes the partition's next batches meanwhile.
        """
        this = asyncio.current_task()
        assert this is not None  # a coroutine of _event_loop, which runs as a task
        self._tasks = [*(t for t in self._tasks if not t.done()),
                       asyncio.create_task(self._event_loop(consumer), name=this.get_name())]
        self._applying[execution_id] = this
        try:
            await self._run_group(execution_id, items, consumer)
        except Exception:  # as _group_done says of a group in a task of its own
            log.exception("server: an event group failed")

    def _start_group(self, execution_id: str, items: list[tuple[Msg, Any]],
                     consumer: PullConsumer) -> None:
        task = asyncio.create_task(self._run_group(execution_id, items, consumer))
        self._groups.add(task)
        task.add_done_callback(self._group_done)
        if execution_id:
            self._applying[execution_id] = task

    async def _run_group(self, execution_id: str, items: list[tuple[Msg, Any]],
                         consumer: PullConsumer) -> None:
        try:
            if execution_id:
                await self._apply_group(execution_id, items)
            else:
                await asyncio.gather(*(refuse_event(self.bus, m, exc) if isinstance(exc, Malformed)
                                       else handler_failed(self.bus, [m], exc) for m, exc in items))
        finally:
            await consumer.grant(len(items))
            if execution_id:
                del self._applying[execution_id]
                following = self._waiting.pop(execution_id, None)
                # Stopping: what waited is not acknowledged and comes back to whoever goes on.
                if following and not self._stopping.is_set():
                    self._start_group(execution_id, following, consumer)

    def _group_done(self, task: asyncio.Task[None]) -> None:
        self._groups.discard(task)
        if not task.cancelled() and task.exception() is not None:
            # _apply_group settles its own failures; this is a bug in the code around it, and
            # the group's events come back after AckWait.
            log.error("server: an event group failed", exc_info=task.exception())

    async def _apply_group(self, execution_id: str, items: list[tuple[Msg, RouterEvent]]) -> None:
        async def commit() -> None:
            try:
                await self._commit_group(execution_id, items)
            except Exception:
                self._cache.forget(execution_id)  # half-applied: the next try reloads
                raise

        try:
            # A full store is waited out holding the group's events (their leases renewed), so
            # none is spent on redeliveries while nothing can be written (bus/storage.py).
            await while_storage_refused(commit, what=f"events of {execution_id}",
                                        keep=lambda: renew_leases([m for m, _ in items]))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # `apply` changed the cached state in place: after a failed commit it holds events
            # that were never stored, and after a failed publish an outbox that a redelivery
            # would overwrite with an empty one. Only the KV copy can be trusted now; loading it
            # again re-publishes its outbox. The group is settled alone: other executions'
            # events of the batch are not held up by it.
            self._cache.forget(execution_id)
            await handler_failed(self.bus, [m for m, _ in items], exc)

    async def _commit_group(self, execution_id: str, items: list[tuple[Msg, RouterEvent]]) -> None:
        for _ in range(COMMIT_RETRIES):
            cached = await self._cache.load(execution_id)
            if cached is None:
                log.warning("events for unknown execution %s acknowledged and dropped", execution_id)
                await asyncio.gather(*(settle(m, Failure.UNKNOWN_EXECUTION) for m, _ in items))
                return
            now = self.clock()
            versions = cached.versions = await readable_versions(named_versions(items),
                                                                 self._cache.playbook)
            # Copies made again of events already applied are left out (server/source_copies.py).
            if not (fresh := fresh_items(cached.state, items)):
                break
            # Applied on the event loop; one whose templates render longer is applied again from
            # the committed state in a thread or a process of its own (server/render_pool.py).
            placed = await render_pool.apply_where_it_fits(
                cached, fresh, now, partial(self._reload, execution_id, versions), self._renders)
            if placed is None:
                break
            cached, fresh, applied, vars_before = placed
            data = await self._codec.encoded(cached.state) if applied else None
            if data is None:
                # Some event could not be applied, or left a state that cannot be stored: apply
                # the group again from the committed state, one event at a time, and fail the
                # execution at the event that did it (never drop the event and leave it running).
                if (again := await self._reload(execution_id, versions, fresh)) is None:
                    break
                cached, fresh = again
                vars_before = dict(cached.state.vars)
                data = await self._apply_until_fault(cached, fresh, now)
            state = cached.state
            if await self._pools.refuse_unserved(state, now):
                data = self._codec.encode(state)
            try:
                cached.revision = await self._commit(execution_id, data, state, cached.revision)
            except KeyWrongLastSequenceError:
                self._cache.forget(execution_id)  # someone else moved it: reload and re-apply
                COMMIT_CONFLICTS.inc()
                log.debug("revision conflict on %s; reloading", execution_id)
                continue
            log.debug("committed %d events of %s at revision %d", len(items), execution_id,
                      cached.revision)
            # Vars go to KV before the outbox: whoever sees `execution.completed` can read them.
            await self._vars.commit_vars(execution_id, vars_before, state.vars)
            await self._marks.publish(execution_id, cached.revision, state.outbox,
                                      tracing.command_headers(state.trace))
            count_execution(state, state.outbox, cached.playbook)
            if state.status != "running":
                self._cache.forget(execution_id)
            break
        else:
            # Every attempt lost the race to other servers: these events were never applied, so
            # they must come back rather than be acknowledged.
            log.warning("events of %s not applied after %d conflicts; redelivering them",
                        execution_id, COMMIT_RETRIES)
            await asyncio.gather(*(settle(m, Failure.TRANSIENT) for m, _ in items))
            return
        # A plain ack: if it is lost, the event comes back and applying it again is a no-op (its
        # run or iteration is no longer in flight), so waiting for the server's confirmation of
        # every ack would only cost throughput.
        for m, _ in items:
            await m.ack()

    async def _reload(self, execution_id: str, versions: dict[str, Playbook], items: list[tuple[
            Msg, RouterEvent]]) -> tuple[Cached, list[tuple[Msg, RouterEvent]]] | None:
        """The committed state again, to apply `items` to anew, and those of them it has not
        applied; None when it is gone or holds them all (another server committed them meanwhile).
        """
        self._cache.forget(execution_id)
        cached = await self._cache.load(execution_id)
        if cached is None:
            return None
        cached.versions = versions
        fresh = fresh_items(cached.state, items)
        return (cached, fresh) if fresh else None

    async def _apply_until_fault(self, cached: Cached, items: list[tuple[Msg, RouterEvent]],
                                 now: float) -> bytes:
        """Apply the group event by event; the first event that raises, or leaves a state that
        cannot be stored, fails the execution instead, with its reason. Returns the encoded state.
        """
        state, outbox = cached.state, []
        for _, event in items:
            before = state.to_json()  # storable: it was committed, or checked just now
            render_pool.note_foreign_outcome(cached.playbook, state, event)
            playbook, event = playbook_for(cached.playbook, cached.versions, event)
            try:
                state = await self._renders.apply_one(playbook, state, event, now)
                await self._codec.encode_fitting(state)
            except Exception as exc:
                error = fault(exc)
                log.warning("%s of %s fails the execution: %s", router.cause_of(event),
                            state.execution_id, error["message"])
                state = ExecutionState.from_dict(jsonutil.loads(before))
                await self._step_results.load(state)
                step = getattr(event, "step", None)
                router.abort(cached.playbook, state, router.cause_of(event),
                             {**error, "event": event.event_type,
                              **({"step": step} if isinstance(step, str) else {})}, now)
            cached.follow(state)
            outbox.extend(state.outbox)
        state.outbox = outbox
        cached.state = state
        return await self._codec.encode_fitting(state)

    async def _commit(self, execution_id: str, data: bytes, state: ExecutionState,
                      last: int) -> int:
        """Revision-checked write of the state (`data`, checked by `_encode`). A finished one
        carries no TTL either: the retention sweep removes it with its events and results.
        """
        return await self.bus.stored.update(EXECUTIONS_BUCKET, execution_id, data, last)
