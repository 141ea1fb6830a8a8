"""Stopping a background loop that swallows its cancellation (bus/stopping.py), as nats-py
does when the cancel lands while it flushes."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from noetl_stream.bus.stopping import stop_task


async def _loop_that_swallows_one_cancel(started: asyncio.Event) -> None:
    started.set()
    with contextlib.suppress(asyncio.CancelledError):  # nats-py's flush drops the cancel
        await asyncio.sleep(3600)
    while True:  # the loop goes on as if nothing had happened
        await asyncio.sleep(3600)


async def test_a_loop_that_swallowed_its_cancel_is_cancelled_again() -> None:
    started = asyncio.Event()
    task = asyncio.create_task(_loop_that_swallows_one_cancel(started))
    await started.wait()
    await asyncio.wait_for(stop_task(task), 5)
    assert task.cancelled()


async def test_cancelling_once_leaves_such_a_loop_running() -> None:
    # What each service's stop() did before: cancel once and await, which never returns here.
    started = asyncio.Event()
    task = asyncio.create_task(_loop_that_swallows_one_cancel(started))
    await started.wait()
    task.cancel()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(asyncio.shield(task), 0.5)
    assert not task.done()
    await stop_task(task)


async def test_a_loop_that_failed_reports_its_error() -> None:
    async def fails() -> None:
        raise ValueError("boom")

    task = asyncio.create_task(fails())
    await asyncio.sleep(0)
    with pytest.raises(ValueError, match="boom"):
        await stop_task(task)
