"""What a consumer does with a message it could not take: ONE table for every consumer (server
requests and events, worker commands, dead-letter advisories).

A failure is classed once (`classify`); the class decides whether the message is acknowledged,
handed back for redelivery, or terminated (`RULES`), and how its sender learns of it (`answer`).
Only a transient infrastructure error is ever redelivered: a message that fails validation,
or that our own code fails on, fails the same way on every delivery, so redelivering it would
only let it hold the consumer up to `max_deliver` times (docs/reliability.md).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from nats import errors as nats_errors
from nats.js import errors as js_errors

from noetl_stream.bus.storage import storage_refusal
from noetl_stream.errors import InfrastructureError
from noetl_stream.formats import NewerFormat
from noetl_stream.messages import Malformed

log = logging.getLogger("noetl_stream.dispositions")

NAK_DELAY_S = 1.0  # a transient failure waits this long before its message comes back
# A message whose execution a newer release stored waits longer: no retry soon will help, and
# its deliveries (the consumer's max_deliver) must last while the servers are upgraded.
NEWER_FORMAT_NAK_DELAY_S = 30.0
# A message whose writes JetStream still refused for lack of room after the handler's own retries
# (bus/storage.py) waits longer: space comes back in minutes, not seconds.
STORAGE_NAK_DELAY_S = 30.0


class Failure(StrEnum):
    MALFORMED_JSON = "malformed_json"  # not JSON, or not a JSON object
    SCHEMA = "schema"  # JSON, but a field is missing, of the wrong type, too long, too deep
    SUBJECT_MISMATCH = "subject_mismatch"  # the body's execution_id / event_type != the subject's
    REFUSED = "refused"  # well formed, refused for what it asks: invalid playbook, id taken
    UNKNOWN_EXECUTION = "unknown_execution"  # names no execution this cluster knows
    TRANSIENT = "transient"  # NATS or a bucket unreachable, a timeout, a lost revision race
    NEWER_FORMAT = "newer_format"  # stored by a newer release: one that reads it handles it
    STORAGE = "storage"  # JetStream refused a write for lack of room (disk, account, stream bound)
    HANDLER_BUG = "handler_bug"  # our code raised anything else


class Disposition(StrEnum):
    ACK = "ack"  # done with it: nothing more can be done
    NAK = "nak"  # redelivered after NAK_DELAY_S
    TERM = "term"  # never redelivered


@dataclass(frozen=True)
class Rule:
    disposition: Disposition
    answer: str  # how whoever sent it learns of it
    delay_s: float = NAK_DELAY_S  # a nak's wait before redelivery


RULES: dict[Failure, Rule] = {
    Failure.MALFORMED_JSON: Rule(Disposition.TERM, "a request: reply on its reply_to when it "
                                 "names one; an event or command: dead letter with the reason"),
    Failure.SCHEMA: Rule(Disposition.TERM, "a request: reply, and `execution.rejected` when its "
                         "execution id is valid; an event or command: dead letter"),
    Failure.SUBJECT_MISMATCH: Rule(Disposition.TERM, "dead letter with both values"),
    Failure.REFUSED: Rule(Disposition.TERM, "reply, and `execution.rejected` for an invalid "
                          "playbook (an id taken by another request: reply only)"),
    Failure.UNKNOWN_EXECUTION: Rule(Disposition.ACK, "a cancel: reply; an event: logged"),
    Failure.TRANSIENT: Rule(Disposition.NAK, "none: it is handled again once NATS answers"),
    Failure.NEWER_FORMAT: Rule(Disposition.NAK, "logged: it comes back every "
                               f"{NEWER_FORMAT_NAK_DELAY_S:g} s until a server of the newer "
                               "release handles it", NEWER_FORMAT_NAK_DELAY_S),
    Failure.STORAGE: Rule(Disposition.NAK, "none: written again in place with backoff for up "
                          "to NOETL_STREAM_STORAGE_RETRY_S, then handed back",
                          STORAGE_NAK_DELAY_S),
    Failure.HANDLER_BUG: Rule(Disposition.TERM, "dead letter with the error; logged with its "
                              "traceback"),
}

# Errors that a later delivery may not meet: the connection, the cluster or a bucket was not
# there, or another server moved the state first. Every other error, NATS' own refusals of a
# bad request included (a bad subject or key, a payload over the limit), is deterministic.
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    TimeoutError, ConnectionError, InfrastructureError,
    nats_errors.TimeoutError, nats_errors.ConnectionClosedError,
    nats_errors.ConnectionReconnectingError, nats_errors.ConnectionDrainingError,
    nats_errors.StaleConnectionError, nats_errors.FlushTimeoutError, nats_errors.NoServersError,
    nats_errors.NoRespondersError, nats_errors.OutboundBufferLimitError,
    nats_errors.UnexpectedEOF, nats_errors.SlowConsumerError,
    js_errors.ServiceUnavailableError, js_errors.ServerError, js_errors.NoStreamResponseError,
    js_errors.KeyWrongLastSequenceError)


def classify(exc: BaseException) -> Failure:
    """The class of a failure raised while a message was handled."""
    if isinstance(exc, Malformed):
        return Failure(exc.failure)
    if isinstance(exc, NewerFormat):
        return Failure.NEWER_FORMAT
    if storage_refusal(exc):  # before TRANSIENT_ERRORS, which hold its class (503)
        return Failure.STORAGE
    if isinstance(exc, TRANSIENT_ERRORS):
        return Failure.TRANSIENT
    return Failure.HANDLER_BUG


def disposition(failure: Failure) -> Disposition:
    return RULES[failure].disposition


class Settleable(Protocol):
    """The acknowledgement half of a JetStream message (nats.aio.msg.Msg)."""

    async def ack(self) -> None: ...

    async def nak(self, delay: float | None = None) -> None: ...

    async def term(self) -> None: ...


async def settle(msg: Settleable, failure: Failure) -> Disposition:
    """Acknowledge, hand back or terminate `msg` as its failure class says; returns which. A
    message already settled (the handler got that far) is left as it is.
    """
    chosen = disposition(failure)
    try:
        if chosen is Disposition.ACK:
            await msg.ack()
        elif chosen is Disposition.NAK:
            await msg.nak(delay=RULES[failure].delay_s)
        else:
            await msg.term()
    except nats_errors.MsgAlreadyAckdError:
        pass
    except TRANSIENT_ERRORS as exc:
        # Not settled: the consumer's AckWait hands it back, which is all a nak would do.
        log.warning("could not %s a message (%s); it comes back after AckWait", chosen, exc)
    return chosen
