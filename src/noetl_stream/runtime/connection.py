"""Connecting to NATS and JetStream with the options every process of ours uses."""

from __future__ import annotations

from dataclasses import dataclass

import nats
from nats.aio.client import Client
from nats.errors import NoServersError
from nats.js import JetStreamContext

from noetl_stream.errors import InfrastructureError
from noetl_stream.subjects import Topology, load_topology


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
        nc = await nats.connect(url, name=name, connect_timeout=5, max_reconnect_attempts=-1,
                                reconnect_time_wait=0.5, allow_reconnect=True,
                                max_outstanding_pings=4)
    except (NoServersError, OSError, TimeoutError) as exc:
        raise InfrastructureError(f"cannot reach NATS at {url}: {exc}") from None
    return Bus(nc, nc.jetstream(timeout=10), load_topology(prefix))
