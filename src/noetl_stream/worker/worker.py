"""The worker: pull commands of one pool, run their pipelines, publish outcomes (ARCHITECTURE §6.3).

Per command: store its `task.started`, the attempt's claim (a copy published again after the
duplicate window is acked without running, worker/attempt_claims.py) -> run the pipeline with
in-progress acks every AckWait/3 -> publish the terminal event (deterministic msg id) -> ack. A
worker that dies mid-command is replaced by redelivery; the re-run publishes the same msg id, so
the router sees one outcome.

Commands the router no longer wants are withdrawn: the worker hears `execution.cancelled` and
`step.timeout` (core subscriptions), cancels the tasks running those commands (a python child is
killed, an HTTP request dropped, a child playbook asked to cancel) and acks them without an
outcome; the router already recorded why. It remembers recent withdrawals, so a command for a
cancelled execution that arrives later is acked without running. A restart reopens a cancelled
execution: commands and end events carry its restart count, and a cancellation withdraws only
the commands issued since the same restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections import OrderedDict
from typing import Any, NamedTuple

from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import errors as js_errors
from pydantic import ValidationError

from noetl_stream import config, ids, jsonutil, messages
from noetl_stream.bus.connection import Bus
from noetl_stream.bus.dead_letters import (
    command_identity,
    dead_letter_message,
    publish_step_failure,
)
from noetl_stream.bus.delivery import delivery_with_time
from noetl_stream.bus.dispositions import Failure, classify, settle
from noetl_stream.bus.heartbeats import Heartbeat
from noetl_stream.bus.publish import publish_event
from noetl_stream.bus.pull import PullConsumer, open_pull
from noetl_stream.bus.signals import decode_event_body
from noetl_stream.bus.storage import (
    describe,
    held_writes,
    retry_bound_s,
    storage_refusal,
    unanswered,
    while_storage_refused,
)
from noetl_stream.errors import InfrastructureError
from noetl_stream.events import ErrorInfo
from noetl_stream.messages import Command, CommandContext, Malformed, checked, parse_object
from noetl_stream.observe import metrics, tracing
from noetl_stream.state.results import ResultStore, holds_ref
from noetl_stream.subjects import DEFAULT_POOL
from noetl_stream.tools.playbook import WITHDRAWN
from noetl_stream.tools.registry import ToolRegistry
from noetl_stream.worker.attempt_claims import AttemptStart
from noetl_stream.worker.credential_guard import CommandInUse, running_command
from noetl_stream.worker.keychain import KeychainResolver
from noetl_stream.worker.pipeline import Pipeline, PipelineResult
from noetl_stream.worker.redact import redact_outcome, scrub

log = logging.getLogger("noetl_stream.worker")

WITHDRAWALS_KEPT = 4096  # recent cancelled executions and timed-out commands remembered


class Worker:
    def __init__(self, bus: Bus, tools: ToolRegistry, *, pool: str = DEFAULT_POOL,
                 concurrency: int = 64, keychain: KeychainResolver | None = None) -> None:
        self.bus = bus
        self.tools = tools
        self.keychain = keychain
        self.results = ResultStore(bus.js)
        self.pool = pool
        self.concurrency = concurrency
        self.redact = config.redact_results()
        self._running: set[asyncio.Task[None]] = set()
        self.heartbeat = Heartbeat(bus, role="worker", pool=pool,
                                   load=lambda: {"running": len(self._running),
                                                 "concurrency": self.concurrency,
                                                 "held_writes": held_writes()})
        self._loop_task: asyncio.Task[None] | None = None
        self._lease_task: asyncio.Task[None] | None = None
        self._consumer: PullConsumer | None = None
        self._stopping = asyncio.Event()
        self._ack_wait_s = bus.topology.pool_consumer(pool).ack_wait_s
        # task -> the command it runs: withdrawn by execution id or command key, and its lease
        # kept by _keep_leases
        self._commands: dict[asyncio.Task[None], _Running] = {}
        self._withdrawn: OrderedDict[str, None] = OrderedDict()
        self._withdrawing: set[asyncio.Task[None]] = set()
        self._withdraw_subs: list[Subscription] = []
        metrics.RUNNING.labels(pool).set_function(lambda: len(self._running))

    async def start(self) -> None:
        decl = self.bus.topology.pool_consumer(self.pool)
        topo = self.bus.topology
        # Subscribed before the first fetch, so no withdrawal of a command we take is missed.
        self._withdraw_subs = [
            await self.bus.nc.subscribe(topo.event_subject("*", etype), cb=self._on_withdrawal)
            for etype in ("execution.cancelled", "step.timeout")]
        # As many commands asked for as can run at once; each one finished asks for another.
        self._consumer = await open_pull(self.bus, decl.stream, decl.durable,
                                         credit=self.concurrency)
        self._loop_task = asyncio.create_task(self._take_loop(self._consumer),
                                              name=f"worker-{self.pool}")
        self._lease_task = asyncio.create_task(self._keep_leases(), name=f"leases-{self.pool}")
        await self.heartbeat.start()

    async def stop(self) -> None:
        self._stopping.set()
        await self.heartbeat.stop()
        for withdraw_sub in self._withdraw_subs:
            # Stopping: a connection already closed or draining has dropped the subscription,
            # whichever of nats-py's errors it says so with.
            with contextlib.suppress(Exception):
                await withdraw_sub.unsubscribe()
        self._withdraw_subs = []
        for loop_task in (self._loop_task, self._lease_task):
            if loop_task is not None:
                loop_task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await loop_task
        for t in list(self._running):
            t.cancel()
        for t in list(self._running):
            with contextlib.suppress(asyncio.CancelledError):
                await t
        if self._consumer is not None:
            # Commands that arrived and were not started go back to the pool at once.
            await self._consumer.stop()
            self._consumer = None

    async def _take_loop(self, consumer: PullConsumer) -> None:
        while not self._stopping.is_set():
            batch = await consumer.next_batch(self.concurrency)
            if not batch:
                continue
            for m in batch[1:]:
                self._track(asyncio.create_task(self._handle(m)))
            # The batch's first command is handled in this task, and a new task takes the next
            # batches: a task of its own would start a turn of the event loop later, after
            # whatever else was ready in the process (in `run`, the server and the watcher).
            this = asyncio.current_task()
            assert this is not None  # _take_loop runs as a task (start)
            self._loop_task = asyncio.create_task(self._take_loop(consumer),
                                                  name=this.get_name())
            self._track(this)
            await self._handle(batch[0])
            return

    def _track(self, task: asyncio.Task[None]) -> None:
        """A task that handles a command: counted as running, cancelled and awaited at stop."""
        self._running.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._running.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("worker: command handler crashed", exc_info=task.exception())

    async def _handle(self, msg: Msg) -> None:
        try:
            await self._handle_command(msg)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # The consumer's boundary: whatever the handler raised is classified and the message
            # settled by _handler_failed; escaping, it would end this task unseen and leave the
            # command to come back after AckWait.
            await self._handler_failed(msg, exc)
        finally:
            if self._consumer is not None:
                # Its slot is free: one more command may come (asked for at once or with the
                # consumer's next request, bus/pull.py).
                await self._consumer.grant(1)

    async def _handle_command(self, msg: Msg) -> None:
        try:
            command = checked(Command, parse_object(msg.data))  # what the pipeline runs
        except Malformed as exc:
            # No redelivery can make it readable: every delivery would fail the same way.
            log.warning("poison command on %s dead-lettered: %s", msg.subject[:200], exc)
            # Kept first: terminating removes it from the work queue.
            await dead_letter_message(self.bus, msg, exc.failure, exc.reason)
            await settle(msg, classify(exc))
            return
        execution_id, step_run_id, step = command.execution_id, command.step_run_id, command.step
        iteration = command.iteration
        key = _command_key(step_run_id, iteration)
        generation = _generation(execution_id, command.restart)
        if generation in self._withdrawn or key in self._withdrawn:
            log.info("command %s of %s withdrawn before it ran: acknowledged", key, execution_id)
            await msg.ack()
            return
        start = messages.event_body("task.started", execution_id, time.time(),
                                    parent_execution_id=command.parent_execution_id, step=step,
                                    step_run_id=step_run_id, iteration=iteration, pool=self.pool)
        delivered = delivery_with_time(msg)  # read once, for the claim and the redelivery count
        if not await AttemptStart(self.bus, msg, command, self.pool, delivered).take(start):
            await msg.ack()  # another copy of this attempt runs or ran (attempt_claims.py)
            return
        task = asyncio.current_task()
        assert task is not None
        self._commands[task] = _Running(generation, key, msg)
        try:
            with tracing.command_span(msg.headers, command, self.pool) as span:
                ok, error = await self._execute(msg, command, execution_id, step_run_id, step,
                                                iteration, 1 if delivered is None
                                                else delivered[0].delivered)
                tracing.finish(span, ok, error)
        except asyncio.CancelledError:
            if task not in self._withdrawing:
                raise  # the worker is stopping: unacked, the command goes to another worker
            task.uncancel()
            log.info("command %s of %s withdrawn while it ran: acknowledged", key, execution_id)
            await msg.ack()
        finally:
            self._commands.pop(task, None)
            self._withdrawing.discard(task)

    async def _handler_failed(self, msg: Msg, exc: Exception) -> None:
        """The handler raised outside the pipeline (which fails its step itself): NATS trouble
        hands the command back; a bug fails its step with the error and dead-letters it, since
        every delivery would meet the same bug (dispositions.py).
        """
        failure = classify(exc)
        log.error("command on %s not handled (%s)", msg.subject[:200], failure, exc_info=exc)
        if failure is Failure.HANDLER_BUG:
            # Best effort on a path that is already failing: the error is logged above, and a
            # second failure here must not hide the first one.
            with contextlib.suppress(Exception):
                await dead_letter_message(self.bus, msg, failure, f"{type(exc).__name__}: {exc}")
                identity = command_identity(msg.data)
                if identity is not None:
                    await publish_step_failure(self.bus, identity, ErrorInfo(
                        kind="internal", message=f"the worker failed on this command: "
                        f"{type(exc).__name__}: {exc}"), time.time(), pool=self.pool)
        await settle(msg, failure)

    async def _on_withdrawal(self, msg: Msg) -> None:
        """`execution.cancelled` or `step.timeout`: stop the commands the router gave up on."""
        try:
            # Checked against its subject: a body cannot withdraw another execution's commands.
            event = decode_event_body(self.bus.topology, msg.subject, msg.data)
        except Malformed as exc:
            log.warning("withdrawal on %s ignored: %s", msg.subject[:200], exc)
            return
        if event["event_type"] == "step.timeout":
            iteration = event.get("iteration")
            target = _command_key(str(event.get("step_run_id")),
                                  iteration if isinstance(iteration, int) else None)
        else:
            restart = event.get("restart")
            target = _generation(str(event["execution_id"]),
                                 restart if isinstance(restart, int) else 0)
        self._withdrawn[target] = None
        while len(self._withdrawn) > WITHDRAWALS_KEPT:
            self._withdrawn.popitem(last=False)
        for task, (generation, key, _) in list(self._commands.items()):
            if target in (generation, key) and task not in self._withdrawing:
                self._withdrawing.add(task)
                task.cancel(WITHDRAWN)

    async def _execute(self, msg: Msg, command: Command, execution_id: str,
                       step_run_id: str, step: str, iteration: int | None, delivered: int
                       ) -> tuple[bool, dict[str, Any] | None]:
        """Run the command and publish its outcome; returns whether it succeeded and its error.
        `delivered`: how many times the command was delivered (1: not a JetStream message).
        """
        parent = command.parent_execution_id  # set on a child execution's commands
        started = time.time()
        if delivered > 1:
            # The lease (AckWait) ran out on another worker, or it died: make that visible.
            metrics.REDELIVERIES.labels(self.pool).inc()
            await publish_event(self.bus, execution_id, "task.redelivered",
                                ids.event_msg_id(execution_id, "task.redelivered", step_run_id,
                                                 iteration, delivered),
                                messages.event_body(
                                    "task.redelivered", execution_id, started,
                                    parent_execution_id=parent, step=step,
                                    step_run_id=step_run_id, iteration=iteration, pool=self.pool,
                                    delivery=delivered), wait=False)
        secrets: set[str] = set()
        try:
            if holds_ref(msg.data):
                command.context = CommandContext.model_validate(
                    await self.results.resolve(dict(command.context)))
            async def publish_action(etype: str, msg_id: str, body: dict[str, Any]) -> None:
                # retry.* / poll.* events; `secrets` is the pipeline's set by the time they run.
                # A full store is waited out as for the outcome (leases kept by _keep_leases):
                # failing the step for it would turn a full disk into a wrong result.
                await while_storage_refused(
                    lambda: publish_event(self.bus, execution_id, etype, msg_id,
                                          scrub(body, secrets)),
                    what=f"{etype} of {_command_key(step_run_id, iteration)} of {execution_id}",
                    retry_unanswered=True, execution_id=execution_id)

            # `-` outside loops, as in message ids: a key (a js_publish msg id) never spells None.
            pipeline = Pipeline(command, self.tools,
                                idempotency_prefix=_command_key(step_run_id, iteration),
                                keychain=self.keychain, on_event=publish_action)
            secrets = pipeline.secrets
            use = CommandInUse(execution_id, command.playbook or None, step, step_run_id,
                               iteration, parent)
            with running_command(use):  # credential scopes are checked against it
                outcome = await pipeline.run()
        except InfrastructureError as exc:
            # A result this step reads is gone from the object store; no retry brings it back.
            outcome = PipelineResult(False, error={"message": str(exc), "kind": "result_ref"})
        except (ValidationError, KeyError, TypeError, ValueError) as exc:
            # A command we cannot read still belongs to a step: fail that step with the reason.
            outcome = PipelineResult(False, error={"message": f"malformed command: {exc}",
                                                   "kind": "command"})
        except Exception as exc:
            # Any other error fails the step with its reason: a handler that crashed would only
            # see the command again after AckWait, and crash again.
            log.exception("command %s of %s failed", step_run_id, execution_id)
            outcome = PipelineResult(False, error={"message": f"{type(exc).__name__}: {exc}",
                                                   "kind": "storage" if storage_refusal(exc)
                                                   else "internal"})
        outcome = _storable(outcome)
        metrics.observe_step(command, self.pool, outcome.ok, time.time() - started)
        etype = messages.outcome_type(outcome.ok, iteration)
        body = messages.outcome_event(
            ok=outcome.ok, execution_id=execution_id, step=step, step_run_id=step_run_id,
            iteration=iteration, timestamp=time.time(), parent_execution_id=parent,
            result=outcome.result, error=outcome.error,
            ctx_patch=outcome.ctx_patch, http=outcome.http, route=outcome.route,
            case_matched=outcome.case_matched,
            duration_ms=round((time.time() - started) * 1000, 3))
        if outcome.output:
            body["output"] = outcome.output  # what python tasks printed (events.py TaskOutput)
        if outcome.input:
            body["input"] = outcome.input  # each task's rendered call (worker/task_inputs.py)
        if outcome.cursor is not None:
            body["cursor"] = outcome.cursor  # a cursor loop's claim: `exhausted` retires the slot
        if self.redact:
            body = redact_outcome(body)  # what the step stores, as NoETL's workers redact it
        body = scrub(body, secrets)
        identity = {"execution_id": execution_id, "step": step, "step_run_id": step_run_id,
                    "iteration": iteration, "parent_execution_id": parent}
        outcome = await self._store_outcome(etype, body, command.max_payload_bytes,
                                            identity, outcome)
        # A plain ack: the outcome is stored by now. A lost ack brings the command back after
        # AckWait, and a double ack would not avoid that: its timeout hands the command back too;
        # the stored outcome then tells the redelivery that the attempt ran (attempt_claims.py).
        await msg.ack()
        return outcome.ok, outcome.error

    async def _store_outcome(self, etype: str, body: dict[str, Any], max_payload: int | None,
                             identity: dict[str, Any], outcome: PipelineResult
                             ) -> PipelineResult:
        """Publish the outcome event (its large values to the object store first); returns the
        outcome the router will see. A full store is waited out here, the command's lease kept
        by _keep_leases: handing the command back would run its tools again and spend its
        deliveries (bus/storage.py).
        """
        execution_id, run, iteration = (identity["execution_id"], identity["step_run_id"],
                                        identity["iteration"])

        async def store() -> None:
            stored = await self.results.externalize_outcome(body, max_payload)
            await publish_event(self.bus, execution_id, etype,
                                ids.event_msg_id(execution_id, etype, run, iteration), stored,
                                pool=self.pool)

        try:
            # Under its msg id: an unanswered publish is made again, never the step's tools.
            await while_storage_refused(
                store, what=f"{etype} of {_command_key(run, iteration)} of {execution_id}",
                retry_unanswered=True, execution_id=execution_id)
        except (js_errors.APIError, TimeoutError) as exc:
            if not (storage_refusal(exc) or unanswered(exc)):
                raise
            return await self._storage_failed(identity, exc)
        return outcome

    async def _storage_failed(self, identity: dict[str, Any], exc: Exception) -> PipelineResult:
        """The outcome found no room for the whole storage bound: the step fails with kind
        `storage`, a small event that may fit where the outcome did not. When it does not fit
        either, the refusal is raised and the command handed back (dispositions.py).
        """
        error = ErrorInfo(kind="storage", message=f"the step's outcome could not be stored: "
                          f"{describe(exc)}; retried for {retry_bound_s():g} s")
        await publish_step_failure(self.bus, identity, error, time.time(), pool=self.pool)
        return PipelineResult(False, error=error.model_dump(mode="json"))

    async def _keep_leases(self) -> None:
        """Every AckWait/3, a progress ack for each command that was already running at the
        previous round: a command's lease is renewed within 2/3 of AckWait of its start and
        every AckWait/3 after, by one loop instead of a timer task per command.
        """
        seen: set[asyncio.Task[None]] = set()
        while True:
            await asyncio.sleep(self._ack_wait_s / 3)
            running = dict(self._commands)
            for task in seen & running.keys():
                # A missed progress ack costs at most a redelivery after AckWait; NATS trouble
                # here must not end the loop that keeps the other leases.
                with contextlib.suppress(Exception):
                    await running[task].msg.in_progress()
            seen = set(running)


def _generation(execution_id: str, restart: int) -> str:
    """What a cancellation withdraws: the execution's commands since its latest restart."""
    return f"{execution_id}~{restart}" if restart else execution_id


class _Running(NamedTuple):
    generation: str  # the execution id, with its restart count once restarted (_generation)
    key: str  # `<step_run_id>:<iteration>`, as a step.timeout names it
    msg: Msg  # the command's delivery, whose lease is kept while it runs


def _storable(outcome: PipelineResult) -> PipelineResult:
    """The outcome, or a failure of its step when its result or ctx patch cannot be stored
    (refused here, where it is produced, so the router never holds a value it cannot commit).
    """
    if not outcome.ok:
        return outcome
    for what, value in (("result", outcome.result), ("ctx patch", outcome.ctx_patch)):
        problem = jsonutil.storable_problem(value)
        if problem is not None:
            # What the task printed stays with the failure; the value that cannot travel goes.
            return dataclasses.replace(outcome, ok=False, result=None, ctx_patch={}, error={
                "message": f"the step's {what} cannot be stored: {problem}", "kind": "result"})
    return outcome


def _command_key(step_run_id: str, iteration: int | None) -> str:
    return f"{step_run_id}:{'-' if iteration is None else iteration}"
