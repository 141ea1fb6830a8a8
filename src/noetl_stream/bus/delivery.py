"""The numbers a JetStream delivery carries in its ack subject, read without building nats-py's
`Msg.metadata` (its dataclasses and timestamp cost more than the rest of taking an event).

The ack subject is `$JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<time>.
<pending>`, or, from servers that name a domain and an account, the same numbers after
`$JS.ACK.<domain>.<account hash>.<stream>.<consumer>` (12 tokens or more).
"""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime
from typing import NamedTuple

from nats.aio.msg import Msg

_SHORT = 9  # tokens of the first form
_LONG = 11  # the least tokens of the second form


class Delivery(NamedTuple):
    delivered: int  # how many times this message has been delivered
    stream_seq: int
    consumer_seq: int


def _numbers(msg: Msg) -> list[str] | None:
    """The ack subject's tokens from `<delivered>` on (delivered, stream seq, consumer seq, time,
    pending, ...); None for a message JetStream did not deliver or an ack subject of neither form.
    """
    reply = msg.reply
    if not reply or not reply.startswith("$JS.ACK."):
        return None
    tokens = reply.split(".")
    if len(tokens) == _SHORT:
        return tokens[4:]
    if len(tokens) >= _LONG:
        return tokens[6:]
    return None


def pending_of(msg: Msg) -> int | None:
    """How many messages the consumer still had for us after this one; None when not told."""
    numbers = _numbers(msg)
    try:
        return int(numbers[4]) if numbers else None
    except (ValueError, IndexError):
        return None


def delivery_of(msg: Msg) -> Delivery | None:
    """The delivery count and sequences of a JetStream message; None for any other message."""
    numbers = _numbers(msg)
    try:
        return Delivery(int(numbers[0]), int(numbers[1]), int(numbers[2])) if numbers else None
    except (ValueError, IndexError):
        return None


def delivery_with_time(msg: Msg) -> tuple[Delivery, float | None] | None:
    """`delivery_of` and the stored time in epoch seconds (None when not told), from one
    reading of the ack subject: a worker reads both of every command it takes.
    """
    numbers = _numbers(msg)
    if not numbers:
        return None
    try:
        delivery = Delivery(int(numbers[0]), int(numbers[1]), int(numbers[2]))
    except (ValueError, IndexError):
        return None
    try:
        return delivery, int(numbers[3]) / 1e9
    except (ValueError, IndexError, OverflowError):
        return delivery, None


def stored_time_of(msg: Msg) -> datetime | None:
    """When the stream stored a JetStream message (its clock); None for any other message."""
    numbers = _numbers(msg)
    try:
        return datetime.fromtimestamp(int(numbers[3]) / 1e9, UTC) if numbers else None
    except (ValueError, IndexError, OverflowError):
        return None


async def renew_leases(msgs: list[Msg]) -> None:
    """A progress ack for each message: its lease starts again (a lost one costs a redelivery,
    which applying again makes harmless).
    """
    for m in msgs:
        with contextlib.suppress(Exception):
            await m.in_progress()
