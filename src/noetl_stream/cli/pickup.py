"""`run`'s warning when nothing takes its first command: after a few seconds without a
`task.started`, it says which pool holds commands and has no live worker (or that workers are
busy), instead of waiting in silence.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable

from noetl_stream.bus.connection import Bus
from noetl_stream.jsonutil import JsonObject

ENV_PICKUP_WARN_S = "NOETL_STREAM_PICKUP_WARN_S"
PICKUP_WARN_S = 5.0


def pickup_warn_s() -> float:
    try:
        return float(os.environ.get(ENV_PICKUP_WARN_S, PICKUP_WARN_S))
    except ValueError:
        return PICKUP_WARN_S


class PickupWatch:
    """Fed every event of the run; `warn_later` says something once if no command was taken."""

    def __init__(self) -> None:
        self.taken = asyncio.Event()

    def __call__(self, event: JsonObject) -> None:
        if event.get("event_type") in ("task.started", "execution.completed", "execution.failed",
                                       "execution.cancelled", "execution.rejected"):
            self.taken.set()

    async def warn_later(self, bus: Bus, execution_id: Callable[[], str | None],
                         say: Callable[[str], None], delay_s: float | None = None) -> None:
        try:
            await asyncio.wait_for(self.taken.wait(), pickup_warn_s() if delay_s is None else delay_s)
            return
        except TimeoutError:
            pass
        from noetl_stream.api.routes_ops import pool_health
        from noetl_stream.server.cluster_metrics import consumers

        try:
            pools = await pool_health(bus, await consumers(bus))
        except Exception:  # a warning must never stop the run; the run goes on waiting
            return
        if self.taken.is_set():
            return
        waiting = execution_id() or "the execution"
        for pool in pools:
            if pool.pending_commands and not pool.live_workers:
                say(f"warning: no worker has taken a command of {waiting} yet: pool "
                    f"{pool.pool!r} has {pool.pending_commands} waiting and no live worker "
                    f"(start one: noetl-stream worker --pool {pool.pool})")
            elif pool.pending_commands:
                say(f"warning: no worker has taken a command of {waiting} yet: pool "
                    f"{pool.pool!r} has {pool.pending_commands} waiting and "
                    f"{pool.live_workers} live worker(s), all busy")
