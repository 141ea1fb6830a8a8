"""The clock a worker's pipeline reads and waits on, passed in so tests can step time.

The router has no clock at all (it is handed `now`); a pipeline needs one for retry back-off and
poll intervals. Tests pass a clock that records the waits and advances at once.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Clock(Protocol):
    def monotonic(self) -> float:
        """Seconds on a clock that never goes back."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait `seconds`, giving the event loop to others."""
        ...


class SystemClock:
    """The real clock: `time.monotonic` and `asyncio.sleep`."""

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


SYSTEM_CLOCK = SystemClock()
