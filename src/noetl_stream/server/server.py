"""The server: JetStream glue around the pure router (ARCHITECTURE §6.2).

Per event batch of one execution: load state -> apply each event (pure) -> commit the new state
with its outbox by revision-checked KV update (retry on conflict) -> publish the outbox with
deterministic msg ids -> mark the outbox published -> ack. A state loaded fresh from KV whose
outbox is not marked has it re-published first, so a crash between commit and publish loses
nothing, and a copy can never run a command twice (server/outbox_marks.py).
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
from nats.js.errors import KeyNotFoundError, KeyWrongLastSequenceError
from nats.js.kv import KeyValue

from noetl_stream import ids, jsonutil, router
from noetl_stream.bus.connection import Bus
from noetl_stream.bus.dead_letters import dead_letter_message
from noetl_stream.bus.delivery import renew_leases
from noetl_stream.bus.dispositions import Failure, classify, settle
from noetl_stream.bus.pull import PullConsumer, open_pull
from noetl_stream.bus.storage import while_storage_refused
from noetl_stream.dsl import template_budget
from noetl_stream.dsl.layering import merge
from noetl_stream.dsl.models import Playbook
from noetl_stream.errors import PlaybookError
from noetl_stream.jsonutil import JsonObject
from noetl_stream.messages import (
    ExecutionRequest,
    Malformed,
    reply_address,
)
from noetl_stream.observe import tracing
from noetl_stream.observe.metrics import COMMIT_CONFLICTS
from noetl_stream.router.state import ExecutionState
from noetl_stream.router_events import RouterEvent
from noetl_stream.server import render_pool
from noetl_stream.server import request_answers as answers
from noetl_stream.server.event_groups import by_execution
from noetl_stream.server.execution_ids import new_execution_id
from noetl_stream.server.execution_metrics import count_execution
from noetl_stream.server.nats_clock import NatsClock
from noetl_stream.server.outbox_marks import OutboxMarks
from noetl_stream.server.partitions import BATCH as PARTITION_BATCH
from noetl_stream.server.partitions import RouterPartitions, partition_of
from noetl_stream.server.playbook_parsing import PLAYBOOK_CACHE_SIZE, parse_off_loop
from noetl_stream.server.pools import KnownPools
from noetl_stream.server.replays import start_of
from noetl_stream.server.retention import EXECUTIONS_BUCKET
from noetl_stream.server.source_copies import fresh_items
from noetl_stream.server.state_codec import StateCodec, Unstorable, fault, writable
from noetl_stream.server.vars_store import VarsStore
from noetl_stream.server.versions import Cached, named_versions, playbook_for, readable_versions
from noetl_stream.state.results import ResultStore
from noetl_stream.state.step_results import StepResults
from noetl_stream.tools.registry import installed_kinds

log = logging.getLogger("noetl_stream.server")

REQUEST_BATCH = 64
COMMIT_RETRIES = 20
STATE_CACHE_SIZE = 10_000  # execution states kept in memory between their events


class Server:
    def __init__(self, bus: Bus, *, clock: Callable[[], float] | None = None) -> None:
        self.bus = bus
        # Timers fire on nats-server's clock (message schedules), so `now` is read on it too.
        self._nats_clock = NatsClock(bus, bus.topology.consumer("noetl-server-requests").stream) \
            if clock is None else None
        self.clock: Callable[[], float] = clock or self._nats_clock or time.time
        self._cache: dict[str, Cached] = {}
        self._playbooks: dict[str, Playbook] = {}
        self._storing = asyncio.Lock()  # parsing and storing a playbook not seen before
        self._tasks: list[asyncio.Task[None]] = []
        # Event groups being applied; by execution, the one being applied and the events that
        # came for it meanwhile (applied together once it ends).
        self._groups: set[asyncio.Task[None]] = set()
        self._applying: dict[str, asyncio.Task[None]] = {}
        self._waiting: dict[str, list[tuple[Msg, Any]]] = {}
        self._consumers: list[PullConsumer] = []
        self._partitions: RouterPartitions | None = None
        self._stopping = asyncio.Event()
        self._executions: KeyValue | None = None
        self._catalog: KeyValue | None = None
        # Plugin kinds installed here are valid words too; read once, without loading plugin code.
        self._kinds = installed_kinds()
        self._vars = VarsStore(bus.js)
        self._pools = KnownPools(bus)
        self._results = ResultStore(bus.js)
        self._step_results = StepResults(bus.js, self._results, publish=bus.stored.publish)
        self._codec = StateCodec(bus.nc, self._results, self._step_results)
        self._marks = OutboxMarks(bus)  # which committed outbox went out (outbox_marks.py)
        self._renders = render_pool.RenderPool()  # where long template renders run

    async def start(self) -> None:
        # A render in the applying thread lets the event loop (and other applies) in between.
        template_budget.pause_between_operations(os.sched_yield)
        if self._nats_clock is not None:
            await self._nats_clock.first_sync()
        self._executions = await self.bus.js.key_value(EXECUTIONS_BUCKET)
        self._catalog = await self.bus.js.key_value("noetl_catalog")
        topo = self.bus.topology
        req = topo.consumer("noetl-server-requests")
        requests = await open_pull(self.bus, req.stream, req.durable, credit=REQUEST_BATCH)
        # Events come per partition of the router's stream, each pinned to one server at a time
        # (server/partitions.py); one loop per partition's durable.
        self._partitions = RouterPartitions(self.bus, on_pinned=self._forget_partition,
                                            clock=self.clock)
        partitions = await self._partitions.start()
        self._consumers = [requests]
        self._tasks = [
            asyncio.create_task(self._loop(requests, REQUEST_BATCH, self._handle_requests),
                                name="requests"),
            *(asyncio.create_task(self._event_loop(events), name=f"router-{n}")
              for n, events in enumerate(partitions))]
        if self._nats_clock is not None:
            self._tasks.append(asyncio.create_task(self._nats_clock.keep_in_sync(),
                                                   name="nats-clock"))

    def _forget_partition(self, partition: int) -> None:
        """Called when a partition's pin comes here: the states cached of that partition's
        executions may be stale (another server held it), so they are read from KV again.
        """
        partitions = self.bus.topology.router_decl().partitions
        for execution_id in [e for e in self._cache if partition_of(e, partitions) == partition]:
            del self._cache[execution_id]

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

    # -- requests --------------------------------------------------------------------------
    async def _handle_requests(self, msgs: list[Msg]) -> None:
        cancel_subject = self.bus.topology.cancel_request_subject()
        cancels = [m for m in msgs if answers.is_cancel(m.subject, cancel_subject)]
        starts = [m for m in msgs if not answers.is_cancel(m.subject, cancel_subject)]
        # Starts first: a parent that cancels a child it has just started may have both requests
        # in one batch, and the cancel must find the child's state. Each request is settled on
        # its own: one that fails never takes the others of its batch with it.
        await asyncio.gather(*(self._guarded(m, self._handle_request) for m in starts))
        await asyncio.gather(*(self._guarded(m, self._handle_cancel) for m in cancels))

    async def _handle_cancel(self, msg: Msg) -> None:
        assert self._executions is not None
        await answers.handle_cancel(self.bus, self._executions, msg, self.clock())

    async def _guarded(self, msg: Msg, handle: Callable[[Msg], Awaitable[None]]) -> None:
        """Run `handle(msg)`; a failure settles the message as dispositions.py says (a bug is
        dead-lettered, NATS trouble handed back), instead of failing the batch.
        """
        try:
            await while_storage_refused(lambda: handle(msg), what=f"message on {msg.subject[:200]}",
                                        keep=lambda: renew_leases([msg]))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            await self._handler_failed([msg], exc)
            if classify(exc) is Failure.HANDLER_BUG:  # it will not come back: say so
                execution_id, reply_to = reply_address(jsonutil.loads_object(msg.data))
                with contextlib.suppress(Exception):
                    await answers.reply(self.bus, reply_to, execution_id, [
                        f"the server failed on this request ({type(exc).__name__}); it is kept "
                        "in the dead-letter stream"])

    async def _handler_failed(self, msgs: list[Msg], exc: Exception) -> None:
        failure = classify(exc)
        if failure is Failure.HANDLER_BUG:
            log.error("server: %d message(s) on %s failed the handler; dead-lettered",
                      len(msgs), msgs[0].subject[:200], exc_info=exc)
            await self._dead_letter(msgs, failure, f"{type(exc).__name__}: {exc}")
        else:
            log.warning("server: %d message(s) on %s not handled (%s: %s); handed back",
                        len(msgs), msgs[0].subject[:200], failure, exc)
        await asyncio.gather(*(settle(m, failure) for m in msgs))

    async def _dead_letter(self, msgs: list[Msg], failure: Failure, detail: str) -> None:
        """Keep refused messages in NOETL_DLQ (a copy that cannot be written is logged: the
        message is settled either way, so it can never hold the consumer).
        """
        results = await asyncio.gather(*(dead_letter_message(self.bus, m, failure, detail)
                                         for m in msgs), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                log.warning("dead letter not written: %s", result)

    async def _handle_request(self, msg: Msg) -> None:
        try:
            request = await answers.checked_start(self.bus, msg)  # a worker's: its pool's
        except Malformed as exc:
            # A body that is JSON but not a valid request may still say who waits for the answer
            # (each only when valid itself: an answer never builds a subject NATS refuses).
            execution_id, reply_to = reply_address(exc.raw)
            await answers.reject(self.bus, msg, execution_id, reply_to,
                                 [f"bad execution request: {exc}"], classify(exc), self.clock())
            return
        execution_id = request.execution_id or new_execution_id()
        assert self._catalog is not None and self._executions is not None
        # The same text is parsed and stored once per server: parsing is the costliest part of a
        # request, and 50 requests for one playbook are the common case. The lock keeps a burst
        # of them from all parsing it before the first one has stored it.
        key = ids.playbook_key(request.playbook)
        playbook = self._playbooks.get(key)
        if playbook is None:
            async with self._storing:
                playbook = self._playbooks.get(key)
                if playbook is None:
                    try:
                        playbook = await parse_off_loop(request.playbook, request.playbook_file,
                                                        self._kinds)
                    except PlaybookError as exc:
                        await answers.reject(
                            self.bus, msg, execution_id, request.reply_to,
                            [str(i) for i in exc.issues if i.severity == "error"],
                            Failure.REFUSED, self.clock())
                        return
                    await self._catalog.put(key, request.playbook.encode())
                    _bounded_put(self._playbooks, key, playbook, PLAYBOOK_CACHE_SIZE)
        workload = merge(playbook.workload, request.payload)  # payload deep-merged over workload
        trace = tracing.execution_trace(execution_id, msg.headers)
        # On the event loop while its renders are short, else in the thread or the pool.
        state, data = await render_pool.start_where_it_fits(
            partial(self._started, playbook, request, execution_id, key, workload, trace),
            lambda: self._renders.start(start_of(request), playbook, self._start_arguments(
                request, execution_id, key, workload)))
        if await self._pools.refuse_unserved(state, self.clock()):
            data = self._codec.encode(state)
        created = True
        try:
            revision = await self._executions.create(execution_id, data)
        except KeyWrongLastSequenceError:
            # Already started (a redelivered or repeated request): re-publish what it committed.
            entry = await self._executions.get(execution_id)
            state = writable(ExecutionState.from_dict(jsonutil.loads(entry.value or b"{}")))
            await self._step_results.load(state)
            revision = int(entry.revision or 0)
            created = False
            if not answers.same_request(state, key, workload, request):
                await answers.refuse_conflict(self.bus, msg, execution_id, request.reply_to)
                return
        self._remember(execution_id, Cached(state, revision, playbook))
        # Before the child's first command: its end can then never reach the parent's log
        # ahead of its start, so the parent's router hears of it while its step still waits.
        await answers.publish_child_started(self.bus, request, state, self.clock())
        # A repeated request re-publishes what the start committed, unless it went out.
        publish = self._marks.publish if created else self._marks.republish
        await publish(execution_id, revision, state.outbox, tracing.command_headers(state.trace))
        if created:
            count_execution(state, state.outbox, playbook)
        await answers.reply(self.bus, request.reply_to, execution_id, [])
        await msg.ack_sync()

    def _started(self, playbook: Playbook, request: ExecutionRequest, execution_id: str,
                 key: str, workload: JsonObject, trace: dict[str, str] | None,
                 made: ExecutionState | Exception | None = None,
                 operations: int = render_pool.INLINE_OPERATIONS) -> tuple[ExecutionState, bytes]:
        """The new execution's state and its encoded commit; a start that raises, or leaves a
        state that cannot be stored, is an execution that failed at once, with the reason.
        `made`: the start as the render pool made it (RenderElsewhere: its templates render long
        for the allowance of `operations`).
        """
        def fresh() -> ExecutionState:
            if isinstance(made, Exception):
                raise made
            return made or render_pool.start_here(start_of(request), playbook, self._start_arguments(
                request, execution_id, key, workload), operations)
        try:
            state = fresh()
            state.trace = trace
            return state, self._codec.encode(state)
        except Exception as exc:
            error = fault(exc)
        log.warning("execution %s fails at its start: %s", execution_id, error["message"])
        # The playbook's start step is never reached: the state holds the failure alone.
        state = ExecutionState(execution_id=execution_id, playbook_key=key, workload=workload,
                               playbook_path=playbook.path, playbook_name=playbook.name,
                               parent_execution_id=request.parent_execution_id,
                               parent_iter=request.parent_iter, started_at=self.clock())
        state.trace, state.labels = trace, dict(request.labels)
        try:
            self._codec.encode(state)
        except Unstorable:
            state.workload = {}  # the payload itself cannot be stored; the error says why
        router.abort(playbook, state, "the start of the execution", error, self.clock())
        return state, self._codec.encode(state)

    def _start_arguments(self, request: ExecutionRequest, execution_id: str, key: str,
                         workload: JsonObject) -> dict[str, object]:
        return {"execution_id": execution_id, "playbook_key": key, "workload": workload,
                "now": self.clock(), "parent_execution_id": request.parent_execution_id,
                "parent_iter": request.parent_iter, "concurrency": request.concurrency,
                "labels": request.labels, "playbook_file": request.playbook_file}

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
                await asyncio.gather(*(self._refuse_event(m, exc) if isinstance(exc, Malformed)
                                       else self._handler_failed([m], exc) for m, exc in items))
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

    async def _refuse_event(self, msg: Msg, exc: Malformed) -> None:
        """An event no delivery can make valid: dead-lettered with the reason and terminated, so
        a flood of them costs one write each and holds up no other execution's events.
        """
        log.warning("event on %s refused (%s): %s", msg.subject[:200], exc.failure, exc)
        failure = classify(exc)
        await self._dead_letter([msg], failure, exc.reason)
        await settle(msg, failure)

    async def _apply_group(self, execution_id: str, items: list[tuple[Msg, RouterEvent]]) -> None:
        async def commit() -> None:
            try:
                await self._commit_group(execution_id, items)
            except Exception:
                self._cache.pop(execution_id, None)  # half-applied: the next try reloads
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
            self._cache.pop(execution_id, None)
            await self._handler_failed([m for m, _ in items], exc)

    async def _commit_group(self, execution_id: str, items: list[tuple[Msg, RouterEvent]]) -> None:
        assert self._executions is not None
        for _ in range(COMMIT_RETRIES):
            cached = await self._load(execution_id)
            if cached is None:
                log.warning("events for unknown execution %s acknowledged and dropped", execution_id)
                await asyncio.gather(*(settle(m, Failure.UNKNOWN_EXECUTION) for m, _ in items))
                return
            now = self.clock()
            versions = cached.versions = await readable_versions(named_versions(items), self._playbook)
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
                self._cache.pop(execution_id, None)  # someone else moved it: reload and re-apply
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
                self._cache.pop(execution_id, None)
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
        self._cache.pop(execution_id, None)
        cached = await self._load(execution_id)
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
        assert self._executions is not None
        return await self.bus.stored.update(EXECUTIONS_BUCKET, execution_id, data, last)

    async def _load(self, execution_id: str) -> Cached | None:
        cached = self._cache.get(execution_id)
        if cached is not None:
            return cached
        assert self._executions is not None and self._catalog is not None
        try:
            entry = await self._executions.get(execution_id)
        except KeyNotFoundError:
            return None
        if entry.value is None:
            return None
        # A state a newer release wrote is refused here, before anything changes it: its events
        # are handed back (dispositions.py `newer_format`) for a server that reads it.
        state = writable(ExecutionState.from_dict(jsonutil.loads(entry.value)))
        await self._step_results.load(state)
        playbook = await self._playbook(state.playbook_key)
        # Whatever the last committer may not have published goes out again (outbox_marks.py).
        revision = int(entry.revision or 0)
        await self._marks.republish(execution_id, revision, state.outbox,
                                    tracing.command_headers(state.trace))
        cached = Cached(state, revision, playbook)
        self._remember(execution_id, cached)
        return cached

    def _remember(self, execution_id: str, cached: Cached) -> None:
        # Bounded: with several servers, an execution another server finished stays cached here
        # until evicted (the cache is only a shortcut; a stale entry fails its revision check).
        _bounded_put(self._cache, execution_id, cached, STATE_CACHE_SIZE)

    async def _playbook(self, key: str) -> Playbook:
        pb = self._playbooks.get(key)
        if pb is None:
            assert self._catalog is not None
            entry = await self._catalog.get(key)
            pb = await parse_off_loop(bytes(entry.value or b"").decode(), key, self._kinds)
            _bounded_put(self._playbooks, key, pb, PLAYBOOK_CACHE_SIZE)
        return pb


def _bounded_put(cache: dict[str, Any], key: str, value: object, limit: int) -> None:
    """Insert or refresh `key`, dropping the least recently stored entries beyond `limit`."""
    cache.pop(key, None)
    cache[key] = value
    while len(cache) > limit:
        del cache[next(iter(cache))]
