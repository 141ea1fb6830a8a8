"""Dead letters: commands that never got an outcome, kept in `NOETL_DLQ` and failed in the router.

A command is dead-lettered in one of two ways:

* JetStream gave it to workers `max_deliver` times and none acknowledged it (each died or lost
  it). JetStream then announces `$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.NOETL_COMMANDS.<durable>`;
  the `NOETL_ADVISORIES` stream keeps that announcement, and the `DeadLetters` service of the
  server processes copies the command into `NOETL_DLQ`, publishes the outcome event the worker
  would have published (`step.failed` or `loop.iteration.failed`, error kind `dead_letter`) and
  removes the command from the work queue.
* A worker cannot read it at all (not a valid `Command`, messages.py). The worker copies it
  here before terminating it, since a terminated message leaves the work-queue stream at once.

Any other message a consumer refuses (an event or request that fails validation, or one its
handler raised on) is kept here too, as bus/dispositions.py says, with the failure class in
`Noetl-Dlq-Failure`.

Every write is idempotent, so a crash at any point is repaired by the advisory's redelivery: the
copy's msg id is the command's stream sequence, the outcome's is the worker's own
(`ids.event_msg_id`), so a late real outcome and the dead-letter failure never both count, and
the command is deleted last. The copy keeps the command's subject and body; what happened to it
travels in `Noetl-Dlq-*` headers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any

from nats.aio.msg import Msg
from nats.js.errors import NotFoundError
from pydantic import ValidationError

from noetl_stream import ids, jsonutil, messages
from noetl_stream.bus.connection import Bus
from noetl_stream.bus.dispositions import classify, settle
from noetl_stream.bus.publish import publish_event
from noetl_stream.bus.pull import PullConsumer, open_pull
from noetl_stream.bus.stopping import stop_task
from noetl_stream.bus.storage import while_storage_refused
from noetl_stream.events import ErrorInfo
from noetl_stream.jsonutil import JsonObject, JsonValue

log = logging.getLogger("noetl_stream.dead_letters")

DLQ_STREAM = "NOETL_DLQ"
CONSUMER = "noetl-server-dead-letters"
REASON_MAX_DELIVERIES = "max_deliveries"
ADVISORY_BATCH = 16
REASON_UNREADABLE = "unreadable"  # failed validation (bus/dispositions.py)
REASON_HANDLER_ERROR = "handler_error"  # its consumer's code raised on it
MAX_KEPT_SUBJECT = 512

H_SUBJECT = "Noetl-Dlq-Subject"
H_STREAM = "Noetl-Dlq-Stream"
H_STREAM_SEQ = "Noetl-Dlq-Stream-Seq"
H_CONSUMER = "Noetl-Dlq-Consumer"
H_DELIVERIES = "Noetl-Dlq-Deliveries"
H_REASON = "Noetl-Dlq-Reason"
H_DETAIL = "Noetl-Dlq-Detail"
H_TIME = "Noetl-Dlq-Time"
H_MSG_ID = "Noetl-Dlq-Msg-Id"
H_EXECUTION = "Noetl-Execution-Id"
H_STEP = "Noetl-Step"
H_STEP_RUN = "Noetl-Step-Run-Id"
H_ITERATION = "Noetl-Iteration"
H_FAILURE = "Noetl-Dlq-Failure"


@dataclass(frozen=True)
class DeadLetter:
    """One message of `NOETL_DLQ`, as `noetl-stream dlq` shows it."""

    seq: int
    time: str
    subject: str
    deliveries: int | None
    reason: str
    detail: str
    execution_id: str | None
    step: str | None
    step_run_id: str | None
    iteration: int | None
    stream_seq: int | None
    consumer: str | None
    data: bytes
    failure: str | None = None  # the failure class of a refused message (dispositions.py)

    def summary(self) -> JsonObject:
        return {"seq": self.seq, "time": self.time, "execution_id": self.execution_id,
                "step": self.step, "step_run_id": self.step_run_id, "iteration": self.iteration,
                "subject": self.subject, "deliveries": self.deliveries, "reason": self.reason,
                "detail": self.detail, "stream_seq": self.stream_seq, "consumer": self.consumer,
                "failure": self.failure}


def command_identity(data: bytes) -> dict[str, Any] | None:
    """The execution, step, run and iteration a command (or event) belongs to, or None when
    they are not valid identifiers (they go into headers, messages.py limits them).
    """
    try:
        envelope = messages.StepIdentity.model_validate(jsonutil.loads(data))
    except (ValueError, ValidationError):
        return None
    return {"execution_id": envelope.execution_id, "step": envelope.step,
            "step_run_id": envelope.step_run_id, "iteration": envelope.iteration,
            "parent_execution_id": envelope.parent_execution_id}


def _one_line(text: str) -> str:
    return " ".join(text.split())[:1000]


def _dead_letter_subject(bus: Bus, subject: str) -> str:
    """`<prefix>.dlq.<subject without its prefix>`; a subject too long to carry a prefix more
    (the sender's own publish may have been up to nats-server's limit) goes to
    `<prefix>.dlq.oversized`, and its start is kept in a header.
    """
    if len(subject) <= MAX_KEPT_SUBJECT:
        return bus.topology.dead_letter_subject(subject)
    return f"{bus.topology.prefix}.dlq.oversized"


async def publish_dead_letter(bus: Bus, *, subject: str, data: bytes, stream: str, stream_seq: int,
                              deliveries: int | None, consumer: str | None, reason: str,
                              detail: str, original_msg_id: str | None = None,
                              failure: str | None = None) -> int:
    """Copy one message into the DLQ; return its DLQ sequence (the first copy's, on a repeat)."""
    headers = {"Nats-Msg-Id": f"dlq:{stream}:{stream_seq}", H_SUBJECT: subject[:MAX_KEPT_SUBJECT],
               H_STREAM: stream, H_STREAM_SEQ: str(stream_seq), H_REASON: reason,
               H_DETAIL: _one_line(detail),
               H_TIME: datetime.now(UTC).isoformat(timespec="milliseconds")}
    if deliveries is not None:
        headers[H_DELIVERIES] = str(deliveries)
    if consumer:
        headers[H_CONSUMER] = consumer
    if original_msg_id:
        headers[H_MSG_ID] = _one_line(original_msg_id)
    if failure:
        headers[H_FAILURE] = failure
    identity = command_identity(data)
    if identity is not None:
        headers |= {H_EXECUTION: identity["execution_id"], H_STEP: _one_line(identity["step"]),
                    H_STEP_RUN: _one_line(identity["step_run_id"])}
        if identity["iteration"] is not None:
            headers[H_ITERATION] = str(identity["iteration"])
    ack = await bus.js.publish(_dead_letter_subject(bus, subject), data, headers=headers)
    return int(ack.seq)


async def dead_letter_message(bus: Bus, msg: Msg, failure: str, detail: str) -> int:
    """Keep a message its consumer refused, with the failure class and reason (dispositions.py);
    call before `msg.term()`, which deletes it from a work queue.
    """
    meta = msg.metadata
    reason = REASON_HANDLER_ERROR if failure == "handler_bug" else REASON_UNREADABLE
    return await publish_dead_letter(
        bus, subject=msg.subject, data=msg.data, stream=meta.stream,
        stream_seq=int(meta.sequence.stream), deliveries=meta.num_delivered,
        consumer=meta.consumer, reason=reason, detail=detail, failure=failure,
        original_msg_id=(msg.headers or {}).get("Nats-Msg-Id"))


class DeadLetters:
    """Turns max-delivery advisories of worker pool consumers into dead letters and failed steps."""

    def __init__(self, bus: Bus, *, clock: Callable[[], float] = time.time) -> None:
        self.bus = bus
        self.clock = clock
        self._task: asyncio.Task[None] | None = None
        self._consumer: PullConsumer | None = None
        self._stopping = asyncio.Event()

    async def start(self) -> None:
        decl = self.bus.topology.consumer(CONSUMER)
        self._consumer = await open_pull(self.bus, decl.stream, decl.durable, credit=ADVISORY_BATCH)
        self._task = asyncio.create_task(self._loop(self._consumer), name="dead-letters")

    async def stop(self) -> None:
        self._stopping.set()
        if self._task is not None:
            await stop_task(self._task)
        if self._consumer is not None:
            # Advisories that arrived and were not handled go back to this or another server.
            await self._consumer.stop()
            self._consumer = None

    async def _loop(self, consumer: PullConsumer) -> None:
        while not self._stopping.is_set():
            msgs = await consumer.next_batch(ADVISORY_BATCH)
            for m in msgs:
                try:
                    # A full store is waited out holding the advisory (bus/storage.py).
                    await while_storage_refused(partial(self.handle_advisory, m),
                                                what=f"dead letter for {m.subject[:200]}",
                                                keep=m.in_progress)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    # The consumer boundary: NATS trouble or a bug must not stop the service;
                    # NATS trouble hands the advisory back, a bug terminates it (dispositions.py).
                    failure = classify(exc)
                    log.exception("dead letters: advisory on %s not handled (%s)", m.subject,
                                  failure)
                    await settle(m, failure)
            await consumer.grant(len(msgs))

    async def handle_advisory(self, msg: Msg) -> None:
        try:
            advisory = jsonutil.loads(msg.data)
            stream, seq = str(advisory["stream"]), int(advisory["stream_seq"])
            deliveries = int(advisory["deliveries"])
            consumer = str(advisory.get("consumer") or "") or None
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("dead letters: unreadable advisory on %s dropped: %s", msg.subject, exc)
            await msg.term()
            return
        await dead_letter_command(self.bus, stream, seq, deliveries, consumer, self.clock(),
                                  detail=f"delivered {deliveries} times without an outcome")
        await msg.ack()


async def dead_letter_command(bus: Bus, stream: str, seq: int, deliveries: int,
                              consumer: str | None, now: float, *, detail: str) -> bool:
    """Copy a command that reached its max deliveries into the DLQ, fail its step (kind
    `dead_letter`) and remove it from the work queue; False when it is gone already
    (acknowledged after all by a slow worker, or dead-lettered before a crash).
    """
    try:
        command = await bus.js.get_msg(stream, seq)
    except NotFoundError:
        return False
    data = command.data or b""
    dlq_seq = await publish_dead_letter(
        bus, subject=str(command.subject), data=data, stream=stream, stream_seq=seq,
        deliveries=deliveries, consumer=consumer, reason=REASON_MAX_DELIVERIES, detail=detail,
        original_msg_id=(command.headers or {}).get("Nats-Msg-Id"))
    identity = command_identity(data)
    if identity is not None:
        error = ErrorInfo(kind="dead_letter",
                          message=f"command {detail} (worker crashed or lost it); "
                          f"dead-lettered as {dlq_seq}")
        await publish_step_failure(bus, identity, error, now,
                                   pool=bus.topology.pool_of_command(str(command.subject)),
                                   dead_letter=dlq_seq)
    log.warning("command %s (stream seq %d) dead-lettered as %d: %s", command.subject, seq,
                dlq_seq, detail)
    with contextlib.suppress(NotFoundError):
        await bus.js.delete_msg(stream, seq)
    return True


async def publish_step_failure(bus: Bus, identity: dict[str, Any], error: ErrorInfo,
                               now: float, *, pool: str, **fields: JsonValue) -> None:
    """The outcome a command's worker would have published, as a failure with `error`, under the
    worker's own msg id and on its pool's subject: a late real outcome and this one never both
    count, and the router takes it as the command's own pool's.
    """
    execution_id, run, iteration = (identity["execution_id"], identity["step_run_id"],
                                    identity["iteration"])
    etype = messages.outcome_type(False, iteration)
    body = messages.outcome_event(
        ok=False, execution_id=execution_id, step=identity["step"], step_run_id=run,
        iteration=iteration, timestamp=now, parent_execution_id=identity["parent_execution_id"],
        error=error, ctx_patch={}, http=None, route=None, case_matched=None, **fields)
    await publish_event(bus, execution_id, etype,
                        ids.event_msg_id(execution_id, etype, run, iteration), body, pool=pool)


# -- reading and removing, for `noetl-stream dlq` --------------------------------------------

def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _dead_letter(seq: int, subject: str, data: bytes, headers: dict[str, str]) -> DeadLetter:
    return DeadLetter(
        seq=seq, time=headers.get(H_TIME, ""), subject=headers.get(H_SUBJECT, subject),
        deliveries=_int(headers.get(H_DELIVERIES)), reason=headers.get(H_REASON, ""),
        detail=headers.get(H_DETAIL, ""), execution_id=headers.get(H_EXECUTION),
        step=headers.get(H_STEP), step_run_id=headers.get(H_STEP_RUN),
        iteration=_int(headers.get(H_ITERATION)), stream_seq=_int(headers.get(H_STREAM_SEQ)),
        consumer=headers.get(H_CONSUMER), data=data, failure=headers.get(H_FAILURE))


async def read_dead_letter(bus: Bus, seq: int) -> DeadLetter | None:
    try:
        raw = await bus.js.get_msg(DLQ_STREAM, seq)
    except NotFoundError:
        return None
    return _dead_letter(seq, str(raw.subject), raw.data or b"", dict(raw.headers or {}))


async def list_dead_letters(bus: Bus, *, limit: int = 50) -> list[DeadLetter]:
    """The newest `limit` dead letters, oldest first."""
    state = (await bus.js.stream_info(DLQ_STREAM)).state
    found: list[DeadLetter] = []
    seq = state.last_seq
    while seq >= max(state.first_seq, 1) and len(found) < limit:
        letter = await read_dead_letter(bus, seq)  # None: a message deleted on its own
        if letter is not None:
            found.append(letter)
        seq -= 1
    return found[::-1]


async def purge_dead_letters(bus: Bus, seq: int | None = None) -> int:
    """Remove one dead letter (`seq`) or all of them; return how many went."""
    if seq is not None:
        held = (await bus.js.stream_info(DLQ_STREAM)).state
        if not held.first_seq <= seq <= held.last_seq:  # NATS answers such a delete with a 500
            return 0
        try:
            return 1 if await bus.js.delete_msg(DLQ_STREAM, seq) else 0
        except NotFoundError:
            return 0
    before = (await bus.js.stream_info(DLQ_STREAM)).state.messages
    await bus.js.purge_stream(DLQ_STREAM)
    return int(before)
