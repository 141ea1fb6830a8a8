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


def pending_of(msg: Msg) -> int | None:
    """How many messages the consumer still had for us after this one; None when not told."""
    reply = msg.reply
    if not reply or not reply.startswith("$JS.ACK."):
        return None
    tokens = reply.split(".")
    index = 8 if len(tokens) == _SHORT else 10 if len(tokens) >= _LONG else -1
    try:
        return int(tokens[index]) if index > 0 else None
    except (ValueError, IndexError):
        return None


def delivery_of(msg: Msg) -> Delivery | None:
    """The delivery count and sequences of a JetStream message; None for any other message."""
    reply = msg.reply
    if not reply or not reply.startswith("$JS.ACK."):
        return None
    tokens = reply.split(".")
    if len(tokens) == _SHORT:
        first = 4
    elif len(tokens) >= _LONG:
        first = 6
    else:
        return None
    try:
        return Delivery(int(tokens[first]), int(tokens[first + 1]), int(tokens[first + 2]))
    except ValueError:
        return None


def stored_time_of(msg: Msg) -> datetime | None:
    """When the stream stored a JetStream message (its clock); None for any other message."""
    reply = msg.reply
    if not reply or not reply.startswith("$JS.ACK."):
        return None
    tokens = reply.split(".")
    index = 7 if len(tokens) == _SHORT else 9 if len(tokens) >= _LONG else -1
    try:
        return datetime.fromtimestamp(int(tokens[index]) / 1e9, UTC) if index > 0 else None
    except (ValueError, IndexError, OverflowError):
        return None


async def renew_leases(msgs: list[Msg]) -> None:
    """A progress ack for each message: its lease starts again (a lost one costs a redelivery,
    which applying again makes harmless).
    """
    for m in msgs:
        with contextlib.suppress(Exception):
            await m.in_progress()
