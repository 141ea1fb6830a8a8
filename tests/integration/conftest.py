"""Fixtures for the integration layer: services on the test's nats-server, a plain client, and
one embedded PostgreSQL per session with a fresh database per test."""

from __future__ import annotations

import itertools
import re
from collections.abc import AsyncIterator
from pathlib import Path

import nats
import pytest
import pytest_asyncio
from plain_client import PlainClient

from noetl_stream.bus.connection import Bus, connect
from noetl_stream.bus.nats_server import NatsServer
from noetl_stream.bus.provision import provision
from noetl_stream.services import run_services
from noetl_stream.subjects import load_topology
from noetl_stream.testing.nats import run_nats_server
from noetl_stream.testing.postgres import PostgresServer, run_postgres_server
from noetl_stream.tools.http import HttpTool


@pytest.fixture
async def services(bus: Bus) -> AsyncIterator[None]:
    async with run_services(bus, python_children=2):
        yield


@pytest.fixture
async def client(nats_server: NatsServer) -> AsyncIterator[PlainClient]:
    nc = await nats.connect(nats_server.url)
    try:
        yield PlainClient(nc)
    finally:
        await nc.close()


@pytest.fixture
async def one_second_window(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Bus]:
    """A provisioned bus on its own nats-server whose streams drop duplicates for 1 s only."""
    monkeypatch.setenv("NOETL_STREAM_DUPLICATE_WINDOW", "1s")
    load_topology.cache_clear()
    try:
        async with run_nats_server(tmp_path / "nats") as server:
            bus = await connect(server.url, name="one-second-window-test")
            try:
                await provision(bus, pools=("later",))
                yield bus
            finally:
                await bus.close()
    finally:
        load_topology.cache_clear()


@pytest.fixture
async def http_tool() -> AsyncIterator[HttpTool]:
    """The http tool as a worker holds it, closed after the test."""
    tool = HttpTool()
    try:
        yield tool
    finally:
        await tool.close()


_database_numbers = itertools.count(1)


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def postgres_server() -> AsyncIterator[PostgresServer]:
    """One PostgreSQL for the whole session: it takes about a second to start."""
    async with run_postgres_server() as server:
        yield server


@pytest.fixture
async def pg_dsn(postgres_server: PostgresServer, request: pytest.FixtureRequest) -> AsyncIterator[str]:
    """A fresh, empty database for this test; its DSN carries the password (TCP)."""
    name = f"t{next(_database_numbers)}_" + re.sub(r"[^a-z0-9_]", "_", request.node.name.lower())[:40]
    dsn = await postgres_server.create_database(name)
    try:
        yield dsn
    finally:
        await postgres_server.drop_database(name)
