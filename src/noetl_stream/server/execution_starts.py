"""The server's request consumer: start and cancel requests.

A start parses the playbook (once per server, server/execution_cache.py), runs `router.start()`,
creates the state in KV `noetl_executions` with `create`, publishes its outbox and marks it
published, answers whoever waits, then acks. A second request with the same execution id finds
the key and only re-publishes what the first committed (unless it went out), so a redelivered
request never starts an execution twice.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from functools import partial

from nats.aio.msg import Msg
from nats.js.errors import KeyWrongLastSequenceError

from noetl_stream import ids, jsonutil, router
from noetl_stream.bus.connection import Bus
from noetl_stream.bus.dispositions import Failure, classify
from noetl_stream.dsl.layering import merge
from noetl_stream.dsl.models import Playbook
from noetl_stream.errors import PlaybookError
from noetl_stream.jsonutil import JsonObject
from noetl_stream.messages import ExecutionRequest, Malformed, reply_address
from noetl_stream.observe import tracing
from noetl_stream.router.state import ExecutionState
from noetl_stream.server import render_pool
from noetl_stream.server import request_answers as answers
from noetl_stream.server.execution_cache import ExecutionCache
from noetl_stream.server.execution_ids import new_execution_id
from noetl_stream.server.execution_metrics import count_execution
from noetl_stream.server.message_failures import guarded
from noetl_stream.server.outbox_marks import OutboxMarks
from noetl_stream.server.pools import KnownPools
from noetl_stream.server.replays import start_of
from noetl_stream.server.state_codec import StateCodec, Unstorable, fault, writable
from noetl_stream.server.versions import Cached
from noetl_stream.state.step_results import StepResults

log = logging.getLogger("noetl_stream.server")


class ExecutionStarts:
    """Handles the batches of the server's request consumer."""

    def __init__(self, bus: Bus, cache: ExecutionCache, *, clock: Callable[[], float],
                 codec: StateCodec, pools: KnownPools, marks: OutboxMarks,
                 step_results: StepResults, renders: render_pool.RenderPool) -> None:
        self.bus = bus
        self.clock = clock
        self._cache = cache
        self._codec = codec
        self._pools = pools
        self._marks = marks
        self._step_results = step_results
        self._renders = renders

    async def handle_requests(self, msgs: list[Msg]) -> None:
        cancel_subject = self.bus.topology.cancel_request_subject()
        cancels = [m for m in msgs if answers.is_cancel(m.subject, cancel_subject)]
        starts = [m for m in msgs if not answers.is_cancel(m.subject, cancel_subject)]
        # Starts first: a parent that cancels a child it has just started may have both requests
        # in one batch, and the cancel must find the child's state. Each request is settled on
        # its own: one that fails never takes the others of its batch with it.
        await asyncio.gather(*(guarded(self.bus, m, self.handle_request) for m in starts))
        await asyncio.gather(*(guarded(self.bus, m, self.handle_cancel) for m in cancels))

    async def handle_cancel(self, msg: Msg) -> None:
        await answers.handle_cancel(self.bus, self._cache.executions, msg, self.clock())

    async def handle_request(self, msg: Msg) -> None:
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
        key = ids.playbook_key(request.playbook)
        try:
            playbook = await self._cache.playbook_of_request(key, request.playbook,
                                                             request.playbook_file)
        except PlaybookError as exc:
            await answers.reject(
                self.bus, msg, execution_id, request.reply_to,
                [str(i) for i in exc.issues if i.severity == "error"],
                Failure.REFUSED, self.clock())
            return
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
        executions = self._cache.executions
        try:
            revision = await executions.create(execution_id, data)
        except KeyWrongLastSequenceError:
            # Already started (a redelivered or repeated request): re-publish what it committed.
            entry = await executions.get(execution_id)
            state = writable(ExecutionState.from_dict(jsonutil.loads(entry.value or b"{}")))
            await self._step_results.load(state)
            revision = int(entry.revision or 0)
            created = False
            if not answers.same_request(state, key, workload, request):
                await answers.refuse_conflict(self.bus, msg, execution_id, request.reply_to)
                return
        self._cache.remember(execution_id, Cached(state, revision, playbook))
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
