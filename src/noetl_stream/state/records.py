"""Views over many records of a bucket: a record that cannot be read is skipped and named.

One garbage value (a heartbeat, an execution state or a credential that no longer decodes) must
not take down the view that lists its neighbours: `/health`, `GET /api/executions`,
`executions list`, `credential list` and `rotate-key` read each record on its own, skip one that
does not decode, log it by key with the reason, and report it with the answer (`skipped`).
NATS being away is no record's fault: those errors still fail the view.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TypeVar

from nats.errors import Error as NatsError

log = logging.getLogger("noetl_stream.records")

T = TypeVar("T")
REASON_CHARS = 300


@dataclass(frozen=True)
class Skipped:
    """A record left out of a view: its key and why it could not be read."""

    key: str
    reason: str

    def __str__(self) -> str:
        return f"{self.key} ({self.reason})"


@dataclass
class Skips:
    """The records one view skipped (`what`: the kind of record, for the log line)."""

    what: str
    items: list[Skipped] = field(default_factory=list)

    def add(self, key: str, exc: BaseException) -> None:
        reason = f"{type(exc).__name__}: {exc}".replace("\n", " ")[:REASON_CHARS]
        log.warning("%s %r skipped: it cannot be read: %s", self.what, key, reason)
        self.items.append(Skipped(key, reason))

    def lines(self) -> list[str]:
        return [f"skipped {self.what} {item}" for item in self.items]


def is_record_fault(exc: Exception) -> bool:
    """Whether `exc` comes from the record's content rather than from reaching NATS."""
    return not isinstance(exc, (NatsError, TimeoutError, ConnectionError))


async def read_each(keys: Iterable[str], read: Callable[[str], Awaitable[T | None]],
                    skips: Skips) -> list[T]:
    """`read(key)` for every key, in order; None (gone meanwhile) is left out, a record that
    raises is skipped and named in `skips`.
    """
    out: list[T] = []
    for key in keys:
        try:
            value = await read(key)
        except Exception as exc:
            if not is_record_fault(exc):
                raise
            skips.add(key, exc)
            continue
        if value is not None:
            out.append(value)
    return out
