"""Fresh execution ids, issued the way NoETL issues them: positive int64s in decimal, time-ordered.

Layout (NoETL's server snowflake), most significant bit first:

    0 | 41 bits: milliseconds since 2024-01-01T00:00:00Z | 10 bits: node | 12 bits: sequence

The sign bit stays 0, so an id fits a signed BIGINT column (until 2093) and sorts by the time it
was issued. Ids of one generator strictly increase. Ids of two generators differ when their nodes
differ; a process's node is `NOETL_STREAM_NODE_ID` when set (give each process of a deployment its
own to rule out collisions) and otherwise drawn at random when the process issues its first id.
Each millisecond's sequence also starts at a random value, so two processes that happen to draw
the same node still collide only if they also draw the same sequence in the same millisecond.

This needs a clock and randomness, so it lives in the runtime shell; ids derived from other ids
(children, idempotency keys) are deterministic and live in `noetl_stream.ids`.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable

from noetl_stream import config
from noetl_stream.errors import InfrastructureError

EPOCH_MS = 1_704_067_200_000  # 2024-01-01T00:00:00Z, NoETL's epoch
TIME_BITS = 41
NODE_BITS = 10
SEQUENCE_BITS = 12
MAX_NODE = (1 << NODE_BITS) - 1
MAX_SEQUENCE = (1 << SEQUENCE_BITS) - 1
_TIME_SHIFT = NODE_BITS + SEQUENCE_BITS


def _wall_ms() -> int:
    return time.time_ns() // 1_000_000


def _random_sequence_start() -> int:
    # At most halfway up, so every millisecond still has at least 2048 ids before borrowing.
    return secrets.randbelow(1 << (SEQUENCE_BITS - 1))


class ExecutionIdGenerator:
    """Issues strictly increasing ids for one node. Safe to share between threads."""

    def __init__(self, node: int, *, clock_ms: Callable[[], int] = _wall_ms,
                 sequence_start: Callable[[], int] = _random_sequence_start) -> None:
        if not 0 <= node <= MAX_NODE:
            raise ValueError(f"node {node} is outside 0..{MAX_NODE}")
        self.node = node
        self._clock_ms = clock_ms
        self._sequence_start = sequence_start
        self._lock = threading.Lock()
        self._last_ms = -1
        self._sequence = 0

    def next_id(self) -> int:
        with self._lock:
            now = self._clock_ms() - EPOCH_MS
            if now < 0:
                raise InfrastructureError("the system clock is before 2024-01-01: execution ids "
                                          "count milliseconds from then; fix the clock")
            if now > self._last_ms:
                self._last_ms, self._sequence = now, self._sequence_start()
            elif self._sequence < MAX_SEQUENCE:
                # The same millisecond, or the clock stepped back: never reuse or go backwards.
                self._sequence += 1
            else:
                # This millisecond's sequence is used up: take the next one rather than block
                # the event loop until the clock gets there.
                self._last_ms, self._sequence = self._last_ms + 1, self._sequence_start()
            if self._last_ms >> TIME_BITS:
                raise InfrastructureError("execution ids ran out of time bits (year 2093)")
            return (self._last_ms << _TIME_SHIFT) | (self.node << SEQUENCE_BITS) | self._sequence


def issued_at_ms(execution_id: int) -> int:
    """Unix milliseconds at which a generated id was issued (meaningless for a derived id)."""
    return (execution_id >> _TIME_SHIFT) + EPOCH_MS


def node_of(execution_id: int) -> int:
    return (execution_id >> SEQUENCE_BITS) & MAX_NODE


_generator: ExecutionIdGenerator | None = None
_generator_lock = threading.Lock()


def _process_generator() -> ExecutionIdGenerator:
    global _generator
    with _generator_lock:
        if _generator is None:
            node = config.node_id_from_env()
            _generator = ExecutionIdGenerator(secrets.randbelow(MAX_NODE + 1) if node is None
                                              else node)
        return _generator


def new_execution_id() -> str:
    """A fresh execution id of this process: the decimal digits of a positive int64."""
    return str(_process_generator().next_id())
