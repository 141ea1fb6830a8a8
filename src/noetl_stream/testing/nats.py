"""A throwaway JetStream-enabled nats-server for tests and local experiments.

The real server starts in milliseconds, so every test gets its own (no in-memory fake):

    async with run_nats_server(tmp_path / "nats") as server:
        bus = await connect(server.url)
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from noetl_stream.bus.nats_server import NatsServer, start_nats_server


@contextlib.asynccontextmanager
async def run_nats_server(folder: Path) -> AsyncIterator[NatsServer]:
    """Start a nats-server with its store in `folder`, yield it, and stop it afterwards.

    Nothing is recorded in `folder/nats.json`, so a server is never reused by accident.
    """
    server = await start_nats_server(folder, record=False)
    try:
        yield server
    finally:
        await server.stop()
