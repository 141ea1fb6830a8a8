"""How many python interpreters a worker holds, and for how long (tools/python.py).

An interpreter costs memory whether or not it runs code, so the pool follows the work:

- an interpreter kept for an execution's next step retires after `idle_s` without one, and
  sooner, after `recycle_s`, when a new one is about to start: the pool grows only while every
  interpreter it holds was used that recently (the worker is not told when an execution ends);
- interpreters kept ready for new executions (fresh, they never ran code) number as many as new
  executions took in the last `idle_s`, between `ready_min` and `ready_max`.

A worker that runs few python steps holds `ready_min` fresh interpreters (and the fork server);
one running many executions' python steps at once holds about one per execution in flight, up to
its cap (tools/python.py `KEPT_PER_PROCESS` per step that may run at once).
"""

from __future__ import annotations

import collections
import os
from dataclasses import dataclass

from noetl_stream.errors import InfrastructureError

ENV_PYTHON_IDLE_S = "NOETL_STREAM_PYTHON_IDLE_S"
ENV_PYTHON_READY_MIN = "NOETL_STREAM_PYTHON_READY_MIN"
DEFAULT_IDLE_S = 10.0
DEFAULT_READY_MIN = 1


@dataclass(frozen=True)
class PoolSizing:
    idle_s: float = DEFAULT_IDLE_S  # an interpreter without a step this long retires
    ready_min: int = DEFAULT_READY_MIN  # fresh interpreters kept even when no step comes
    ready_max: int = 2  # fresh interpreters kept while new executions keep coming

    @property
    def recycle_s(self) -> float:
        """Idle this long, a kept interpreter makes way for a new execution's instead of the
        pool growing: its execution has most likely ended (the worker is not told when).
        """
        return self.idle_s / 5

    def __post_init__(self) -> None:
        if not self.idle_s > 0:
            raise InfrastructureError(f"python idle time {self.idle_s:g} s: give more than 0")
        if self.ready_min < 0 or self.ready_max < self.ready_min:
            raise InfrastructureError(f"python interpreters kept ready: {self.ready_min} to "
                                      f"{self.ready_max}, give 0 <= minimum <= maximum")

    @classmethod
    def from_env(cls, *, idle_s: float | None = None, ready_max: int = 2) -> PoolSizing:
        """The sizing the worker's environment sets; `idle_s` (the CLI's) wins over it."""
        if idle_s is None:
            idle_s = _seconds(ENV_PYTHON_IDLE_S, DEFAULT_IDLE_S)
        ready_min = _whole(ENV_PYTHON_READY_MIN, DEFAULT_READY_MIN)
        ready_max = max(ready_max, 0)
        # A pool told to keep none ready (`warm` 0) keeps none, whatever the minimum says.
        return cls(idle_s=idle_s, ready_min=min(ready_min, ready_max), ready_max=ready_max)


def _seconds(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise InfrastructureError(f'{name}="{raw}": a number of seconds greater than 0')
    return value


def _whole(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    if not raw.isdigit():
        raise InfrastructureError(f'{name}="{raw}": a whole number, 0 or more')
    return int(raw)


class ReadyDemand:
    """How many fresh interpreters to keep ready: as many as new executions took in the last
    `idle_s` (only the latest `ready_max` takes matter), within the sizing's bounds.
    """

    def __init__(self, sizing: PoolSizing) -> None:
        self.sizing = sizing
        self._takes: collections.deque[float] = collections.deque(maxlen=max(1, sizing.ready_max))

    def took(self, now: float) -> None:
        self._takes.append(now)

    def target(self, now: float) -> int:
        recent = sum(1 for t in self._takes if now - t <= self.sizing.idle_s)
        return max(self.sizing.ready_min, min(self.sizing.ready_max, recent))
