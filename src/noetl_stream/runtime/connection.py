"""Connecting to NATS and JetStream with the options every process of ours uses."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import nats
from nats.aio.client import Client
from nats.errors import NoServersError
from nats.js import JetStreamContext

from noetl_stream.errors import InfrastructureError
from noetl_stream.subjects import Topology, load_topology

INITIAL_CONNECT_ATTEMPTS = 3

log = logging.getLogger("noetl_stream.connection")


async def _log_error(exc: Exception) -> None:
    log.warning("nats: %s", exc or type(exc).__name__)


@dataclass
class Bus:
    """A NATS connection with its JetStream context and the topology it speaks."""

    nc: Client
    js: JetStreamContext
    topology: Topology

    async def close(self) -> None:
        if not self.nc.is_closed:
            await self.nc.drain()


async def connect(url: str, *, prefix: str = "noetl", name: str = "noetl-stream") -> Bus:
    try:
        # A few attempts for the first connection (with -1, nats-py would retry it forever, so a
        # wrong URL would hang instead of failing); once connected, reconnect without limit.
        nc = await nats.connect(url, name=name, connect_timeout=5,
                                max_reconnect_attempts=INITIAL_CONNECT_ATTEMPTS,
                                reconnect_time_wait=0.5, allow_reconnect=True,
                                max_outstanding_pings=4, error_cb=_log_error)
    except (NoServersError, OSError, TimeoutError) as exc:
        raise InfrastructureError(f"cannot reach NATS at {url}: {exc or type(exc).__name__}") from None
    nc.options["max_reconnect_attempts"] = -1
    return Bus(nc, nc.jetstream(timeout=10), load_topology(prefix))
