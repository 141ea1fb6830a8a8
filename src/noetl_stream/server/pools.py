"""Which worker pools exist, so a command for a pool nobody serves fails its step at once.

A pool is known when its durable consumer exists on the commands stream (`noetl-stream init
--pool NAME` declares it; every worker creates its own pool's at start) or a live worker
heartbeats in it (bus/heartbeats.py). A command the router addressed to any other pool would
wait in the stream for good; the server publishes in its place the failure its worker would have
sent (`step.failed` or `loop.iteration.failed`, error kind `pool`), under the same msg id.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from nats.js.errors import NotFoundError

from noetl_stream import ids
from noetl_stream.bus.connection import Bus
from noetl_stream.bus.heartbeats import live_processes
from noetl_stream.events import ErrorInfo
from noetl_stream.messages import Command, outcome_event, outcome_type
from noetl_stream.router.state import ExecutionState, Outgoing

log = logging.getLogger("noetl_stream.pools")


class KnownPools:
    """Pools seen to exist; a pool once known stays known (consumers are rarely removed)."""

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self._known: set[str] = set()

    @property
    def known(self) -> list[str]:
        return sorted(self._known)

    async def unknown(self, pools: set[str]) -> set[str]:
        """The pools among `pools` that neither have a consumer nor a live worker."""
        missing = {p for p in pools - self._known if not await self._has_consumer(p)}
        if missing:
            live = {str(p.get("pool")) for p in await _live_workers(self.bus)}
            missing -= live
        self._known |= pools - missing
        return missing

    async def refuse_unserved(self, state: ExecutionState, now: float) -> bool:
        """Replace the outbox's commands for pools no worker serves with their steps' failures
        (`refuse_commands`); whether there were any.
        """
        pools = {m.pool for m in state.outbox if m.kind == "command"}
        if pools <= self._known:  # none, or all seen served already: nothing to look up
            return False
        unknown = await self.unknown(pools)
        if not unknown:
            return False
        log.warning("execution %s addresses pools no worker serves: %s", state.execution_id,
                    ", ".join(sorted(unknown)))
        state.outbox = refuse_commands(state.outbox, unknown, self.known, now)
        return True

    async def _has_consumer(self, pool: str) -> bool:
        decl = self.bus.topology.pool_consumer(pool)
        try:
            await self.bus.js.consumer_info(decl.stream, decl.durable)
        except NotFoundError:
            return False
        return True


async def _live_workers(bus: Bus) -> list[Mapping[str, object]]:
    try:
        return [p for p in await live_processes(bus) if p.get("role") == "worker"]
    except Exception as exc:  # no runtime bucket (not provisioned): no heartbeat to go by
        log.debug("heartbeats not read: %s", exc)
        return []


def refuse_commands(outbox: list[Outgoing], unknown: set[str], known: list[str],
                    now: float) -> list[Outgoing]:
    """`outbox` with each command for an `unknown` pool replaced by its step's failure."""
    out = []
    for m in outbox:
        command = m.body
        if not isinstance(command, Command) or m.pool not in unknown:
            out.append(m)
            continue
        execution_id, run, iteration = command.execution_id, command.step_run_id, command.iteration
        etype = outcome_type(False, iteration)
        message = (f'no worker serves pool "{m.pool}": no consumer was declared for it '
                   f"(`noetl-stream init --pool {m.pool}`) and no worker of it is alive"
                   + (f"; known pools: {', '.join(sorted(known))}" if known else ""))
        failure = outcome_event(ok=False, execution_id=execution_id, step=command.step,
                                step_run_id=run, iteration=iteration, timestamp=now,
                                parent_execution_id=command.parent_execution_id,
                                error=ErrorInfo(message=message, kind="pool", pool=m.pool))
        out.append(Outgoing("event", ids.event_msg_id(execution_id, etype, run, iteration),
                            failure, event_type=etype, pool=m.pool))
    return out
