"""Fixtures shared by the integration and e2e layers: a real nats-server per test, a provisioned
bus on it, a real local HTTP service, and a private NOETL_STREAM_HOME for every test."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp.test_utils import TestServer

from local_http import HttpService, http_app
from noetl_stream.runtime.connection import Bus, connect
from noetl_stream.runtime.nats_server import NatsServer
from noetl_stream.runtime.provision import provision
from noetl_stream.testing.nats import run_nats_server


@pytest.fixture(autouse=True)
def noetl_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Keep every test's embedded store out of the user's home and away from other tests."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("NOETL_STREAM_HOME", str(home))
    monkeypatch.delenv("NOETL_STREAM_NATS_URL", raising=False)
    monkeypatch.delenv("NOETL_STREAM_PREFIX", raising=False)
    monkeypatch.delenv("NOETL_STREAM_SERVER", raising=False)  # or the CLI would go remote
    monkeypatch.delenv("NOETL_STREAM_TOKEN", raising=False)
    return home


@pytest.fixture
async def nats_server(tmp_path: Path) -> AsyncIterator[NatsServer]:
    async with run_nats_server(tmp_path / "nats") as server:
        yield server


@pytest.fixture
async def bus(nats_server: NatsServer) -> AsyncIterator[Bus]:
    bus = await connect(nats_server.url, name="noetl-stream-test")
    try:
        await provision(bus)
        yield bus
    finally:
        await bus.close()


@pytest.fixture
async def http_service() -> AsyncIterator[HttpService]:
    service = HttpService(url="")
    server = TestServer(http_app(service), host="127.0.0.1")
    await server.start_server()
    service.url = str(server.make_url("")).rstrip("/")
    try:
        yield service
    finally:
        await server.close()
