"""Waiting for a condition by polling it, instead of sleeping and hoping.

`assert_eventually` re-runs a check until it stops raising AssertionError, and re-raises the
last failure when the time is up, so a test that never converges still says why.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def assert_eventually(check: Callable[[], T | Awaitable[T]], *, timeout_s: float = 10.0,
                            interval_s: float = 0.02) -> T:
    """Call `check` (sync or async) until it returns without an AssertionError; return its value."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            value = check()
            if inspect.isawaitable(value):
                return await value
            return value
        except AssertionError:
            if time.monotonic() >= deadline:
                raise
        await asyncio.sleep(interval_s)
