"""The one table of what a consumer does with a message it cannot take, row by row."""

from __future__ import annotations

import pytest
from nats import errors as nats_errors
from nats.js import errors as js_errors

from noetl_stream.bus.dispositions import (
    NAK_DELAY_S,
    NEWER_FORMAT_NAK_DELAY_S,
    RULES,
    STORAGE_NAK_DELAY_S,
    Disposition,
    Failure,
    classify,
    disposition,
    settle,
)
from noetl_stream.errors import InfrastructureError
from noetl_stream.formats import NewerFormat
from noetl_stream.messages import Malformed

# Each row of docs/reliability.md's table: the failure class and what it must do.
TABLE = [
    (Failure.MALFORMED_JSON, Disposition.TERM),
    (Failure.SCHEMA, Disposition.TERM),
    (Failure.SUBJECT_MISMATCH, Disposition.TERM),
    (Failure.REFUSED, Disposition.TERM),
    (Failure.UNKNOWN_EXECUTION, Disposition.ACK),
    (Failure.TRANSIENT, Disposition.NAK),
    (Failure.NEWER_FORMAT, Disposition.NAK),
    (Failure.STORAGE, Disposition.NAK),
    (Failure.HANDLER_BUG, Disposition.TERM),
]


class Recorded:
    """A message that records how it was settled (the three calls of nats' Msg)."""

    def __init__(self, fail_with: Exception | None = None) -> None:
        self.calls: list[tuple[str, float | None]] = []
        self.fail_with = fail_with

    async def _record(self, name: str, delay: float | None = None) -> None:
        if self.fail_with is not None:
            raise self.fail_with
        self.calls.append((name, delay))

    async def ack(self) -> None:
        await self._record("ack")

    async def nak(self, delay: float | None = None) -> None:
        await self._record("nak", delay)

    async def term(self) -> None:
        await self._record("term")


def test_the_table_has_one_row_per_failure_class() -> None:
    assert set(RULES) == set(Failure) == {f for f, _ in TABLE}
    assert all(rule.answer for rule in RULES.values())


@pytest.mark.parametrize(("failure", "expected"), TABLE)
def test_each_failure_class_is_settled_as_the_table_says(failure: Failure,
                                                         expected: Disposition) -> None:
    assert disposition(failure) is expected


def test_only_what_a_later_delivery_may_handle_is_redelivered() -> None:
    # NATS trouble, a full store, or an execution a newer release stored (a server of that
    # release takes it).
    assert [f for f in Failure if disposition(f) is Disposition.NAK] == [
        Failure.TRANSIENT, Failure.NEWER_FORMAT, Failure.STORAGE]


@pytest.mark.parametrize(("failure", "call"), [
    (Failure.SCHEMA, ("term", None)),
    (Failure.UNKNOWN_EXECUTION, ("ack", None)),
    (Failure.TRANSIENT, ("nak", NAK_DELAY_S)),
    (Failure.NEWER_FORMAT, ("nak", NEWER_FORMAT_NAK_DELAY_S)),
    (Failure.STORAGE, ("nak", STORAGE_NAK_DELAY_S)),
    (Failure.HANDLER_BUG, ("term", None)),
])
async def test_settle_makes_the_call_of_the_table(failure: Failure, call: tuple[str, float]) -> None:
    msg = Recorded()
    assert await settle(msg, failure) is disposition(failure)
    assert msg.calls == [call]


async def test_settle_leaves_a_message_already_settled_alone() -> None:
    msg = Recorded(fail_with=nats_errors.MsgAlreadyAckdError())
    assert await settle(msg, Failure.SCHEMA) is Disposition.TERM


async def test_settle_on_a_lost_connection_leaves_the_message_to_ack_wait() -> None:
    msg = Recorded(fail_with=nats_errors.ConnectionClosedError())
    assert await settle(msg, Failure.HANDLER_BUG) is Disposition.TERM
    assert msg.calls == []


@pytest.mark.parametrize(("exc", "failure"), [
    (Malformed("malformed_json", "not JSON"), Failure.MALFORMED_JSON),
    (Malformed("schema", "execution_id: too long"), Failure.SCHEMA),
    (Malformed("subject_mismatch", "the body's execution_id"), Failure.SUBJECT_MISMATCH),
    (nats_errors.TimeoutError(), Failure.TRANSIENT),
    (TimeoutError(), Failure.TRANSIENT),
    (nats_errors.ConnectionClosedError(), Failure.TRANSIENT),
    (nats_errors.NoRespondersError(), Failure.TRANSIENT),
    (js_errors.ServiceUnavailableError(), Failure.TRANSIENT),
    (js_errors.KeyWrongLastSequenceError(), Failure.TRANSIENT),
    (InfrastructureError("NATS went away"), Failure.TRANSIENT),
    (NewerFormat("the state of execution 1", 3, 2), Failure.NEWER_FORMAT),
    # No room: the store, an account's limit, a stream's bound (bus/storage.py).
    (js_errors.ServiceUnavailableError(code=503, err_code=10023,
                                       description="insufficient resources"), Failure.STORAGE),
    (js_errors.APIError(code=400, err_code=10002,
                        description="resource limits exceeded for account"), Failure.STORAGE),
    (js_errors.ServiceUnavailableError(code=503, err_code=10077,
                                       description="maximum bytes exceeded"), Failure.STORAGE),
    (js_errors.ServiceUnavailableError(code=503, err_code=10077,
                                       description="stream sealed"), Failure.TRANSIENT),
    # NATS refusing what we asked is deterministic: it would refuse it on every delivery.
    (js_errors.InvalidKeyError(), Failure.HANDLER_BUG),
    (js_errors.BadRequestError(), Failure.HANDLER_BUG),
    (nats_errors.MaxPayloadError(), Failure.HANDLER_BUG),
    (nats_errors.BadSubjectError(), Failure.HANDLER_BUG),
    (KeyError("step"), Failure.HANDLER_BUG),
    (TypeError("list indices"), Failure.HANDLER_BUG),
])
def test_classify_names_the_class_of_an_error(exc: Exception, failure: Failure) -> None:
    assert classify(exc) is failure
