"""Stopping a background loop that may not notice it was cancelled.

nats-py swallows a cancellation that arrives while it flushes (`Client._flush_pending` catches
CancelledError), so a loop cancelled in the middle of a publish or a request carries on as if
nothing happened, and a `stop()` that awaits it once waits forever. `stop_task` cancels again
until the task is done.
"""

from __future__ import annotations

import asyncio
import contextlib

RECANCEL_S = 0.2  # a swallowed cancellation is repeated this often


async def stop_task(task: asyncio.Task[object] | None) -> None:
    """Cancel `task` and wait for its end, cancelling again for as long as it keeps running."""
    if task is None:
        return
    while not task.done():
        task.cancel()
        await asyncio.wait({task}, timeout=RECANCEL_S)
    with contextlib.suppress(asyncio.CancelledError):
        task.result()
