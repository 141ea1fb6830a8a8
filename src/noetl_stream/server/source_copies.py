"""Copies of events NOETL_ROUTER made again, told apart from events not applied yet.

NOETL_ROUTER is a work queue sourced from NOETL_EVENTS; each copy names its origin's sequence in
its `Nats-Stream-Source` header. After a nats-server restart the work queue, empty once its copies
are acknowledged, has no last copy to resume its sourcing after, and nats-server copies events of
NOETL_EVENTS again. Such a copy is a new message: its NOETL_ROUTER sequence is past every earlier
copy's, while its origin is an event the execution may have applied already.

The committed state keeps two marks, set by the server beside the events' effects and committed
with them (a group whose commit fails leaves them as they were):

- `source_mark`: the highest origin sequence applied and the NOETL_ROUTER sequence of the copy it
  came in. An earlier origin copied after that copy is a copy made again. Copies are made in
  origin order, so the first copy of an earlier event precedes the mark's copy: an earlier event
  that comes late (redelivered after a failed group, or after a server died holding it) has a
  lower NOETL_ROUTER sequence and is applied. A plain high-water mark of origins would drop it.
- `source_recent`: the origins of the last RECENT events applied. A first copy still pending at
  the restart comes back after its lease, possibly after its second copy was applied: its origin
  is then among the recent ones.

A copy whose origin is neither recent nor earlier than the mark and copied after it is applied. A
state without marks (written before they existed) applies every copy.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import Any, NamedTuple

from nats.aio.msg import Msg

from noetl_stream.bus.delivery import delivery_of
from noetl_stream.observe.metrics import EVENTS_COPIED_AGAIN
from noetl_stream.router.state import ExecutionState
from noetl_stream.server.partitions import SOURCE_HEADER

log = logging.getLogger("noetl_stream.server")

# Origins of the latest events applied that a state keeps: a first copy pending at a restart
# comes back within its lease (NOETL_ROUTER's ack_wait), seldom after this many more events.
RECENT = 128


class Copy(NamedTuple):
    """Where a copy in NOETL_ROUTER came from: its origin's NOETL_EVENTS sequence and its own."""

    origin: int
    copy: int


def copy_of(msg: Msg) -> Copy | None:
    """The sequences of a copy NOETL_ROUTER delivered; None for a message that is not one (no
    `Nats-Stream-Source` header, or not a JetStream delivery): such a message is never skipped.
    """
    source = msg.headers.get(SOURCE_HEADER) if msg.headers else None
    parts = source.split(" ", 2) if source else []  # the rest, a kilobyte, is not read
    delivery = delivery_of(msg)
    if len(parts) < 2 or not parts[1].isdigit() or delivery is None:
        return None
    return Copy(int(parts[1]), delivery.stream_seq)


def mark_of(state: ExecutionState) -> Copy | None:
    """The state's mark; None when it has none (a new execution, or a state written before)."""
    mark = state.source_mark
    if len(mark) != 2 or not all(isinstance(n, int) for n in mark):
        return None
    return Copy(mark[0], mark[1])


def applied_before(mark: Copy | None, recent: Collection[int], copy: Copy | None) -> bool:
    """Whether `copy` is a copy of an event applied already, as far as the marks tell."""
    if copy is None:
        return False
    if copy.origin in recent:
        return True
    return mark is not None and (copy.origin == mark.origin or (
        copy.origin < mark.origin and copy.copy > mark.copy))


def sort_out(state: ExecutionState, copies: list[Copy | None]) -> list[bool]:
    """For each copy of a group, in order, whether it is applied (True) or was applied before;
    moves the state's marks past the copies to apply. Set before they are applied, so every way
    the server applies a group (here, in the render pool, one event at a time) commits them.
    """
    mark = mark_of(state)
    before = state.source_recent  # at most RECENT: looked through and extended, not copied
    added: list[int] = []
    fresh: list[bool] = []
    for copy in copies:
        again = copy is not None and (copy.origin in added or applied_before(mark, before, copy))
        fresh.append(not again)
        if again or copy is None:
            continue
        added.append(copy.origin)
        if mark is None or copy.origin > mark.origin:
            mark = copy
    if mark is not None:
        state.source_mark = [mark.origin, mark.copy]
        before.extend(added)
        del before[:-RECENT]
    return fresh


def fresh_items(state: ExecutionState, items: list[tuple[Msg, Any]]) -> list[tuple[Msg, Any]]:
    """The events of a group `state` has not applied yet, in order (`sort_out`); the others are
    logged and counted. Their messages are acknowledged with the group's.
    """
    fresh = sort_out(state, [copy_of(m) for m, _ in items])
    again = [copy_of(m) for (m, _), keep in zip(items, fresh, strict=True) if not keep]
    if again:
        EVENTS_COPIED_AGAIN.inc(len(again))
        log.debug("%d event(s) of %s copied again by NOETL_ROUTER skipped (origins %s)",
                  len(again), state.execution_id, ", ".join(str(c.origin) for c in again if c))
    return [item for item, keep in zip(items, fresh, strict=True) if keep]
