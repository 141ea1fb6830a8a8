"""A pass that a server runs every few seconds in its own task (the retention sweep, the stall
check): a failing pass is logged and the next one tries again; stopping cancels the task.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from noetl_stream.bus.stopping import stop_task

log = logging.getLogger(__name__)


class Periodic:
    """Runs `run` every `every_s` seconds, the first time `first_after_s` seconds after start."""

    def __init__(self, what: str, run: Callable[[], Awaitable[object]], *, every_s: float,
                 first_after_s: float | None = None) -> None:
        self.what = what  # names the task and the pass in the log: "retention sweep"
        self.run = run
        self.every_s = every_s
        self.first_after_s = every_s if first_after_s is None else first_after_s
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name=self.what.replace(" ", "-"))

    async def stop(self) -> None:
        if self._task is not None:  # cancelled again until it ends: nats-py can drop a cancel
            await stop_task(self._task)
        self._task = None

    async def _loop(self) -> None:
        await asyncio.sleep(self.first_after_s)
        while True:
            try:
                await self.run()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # NATS busy or failing over: the next pass tries again
                log.warning("%s failed: %s", self.what, exc or type(exc).__name__)
            await asyncio.sleep(self.every_s)
