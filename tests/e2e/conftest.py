"""Every execution an e2e test makes on its nats-server must verify: after the test, each state
committed there is rebuilt from its events through the router and compared with it
(`noetl-stream verify`, noetl_stream/testing/verifying.py); a difference fails the test, naming
the execution and the field. A test whose states are not the consequence of their events (a state
written by hand, or by another release) says so with `@pytest.mark.unverified("why")`.

The browser tests share one `browser` fixture, below.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from processes import Processes

from noetl_stream.bus.connection import Bus, connect
from noetl_stream.bus.nats_server import NatsServer
from noetl_stream.testing.verifying import differences, verify_every_execution

if TYPE_CHECKING:
    from playwright.async_api import Browser

CHECK = "every_execution_verifies"
HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Each e2e test on a nats-server of its own ends with the check. The hook sees every test
    of the session, so the ones outside this folder (where the fixture is unknown) are left be."""
    for item in items:
        if HERE not in Path(item.path).resolve().parents:
            continue
        names = getattr(item, "fixturenames", None)
        if isinstance(names, list) and "nats_server" in names and CHECK not in names \
                and item.get_closest_marker("unverified") is None:
            names.append(CHECK)


@pytest.fixture
async def every_execution_verifies(nats_server: NatsServer) -> AsyncIterator[None]:
    yield
    bus = await connect(nats_server.url, name="e2e-verify")
    try:
        found = differences(await verify_every_execution(bus))
    finally:
        await bus.close()
    assert found is None, found


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    """Headless Debian chromium, driven by Playwright; a fresh profile for each test."""
    from playwright.async_api import async_playwright
    from web_ui import CHROMIUM, CHROMIUM_FLAGS

    if not CHROMIUM.exists():
        pytest.fail(f"the web UI test needs Debian's chromium at {CHROMIUM}: apt-get install -y "
                    "chromium (`make browser` installs it when run as root)")
    async with async_playwright() as pw:
        launched = await pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_FLAGS)
        try:
            yield launched
        finally:
            await launched.close()


@pytest.fixture
async def procs(nats_server: NatsServer, bus: Bus, tmp_path: Path) -> AsyncIterator[Processes]:
    """A `noetl-stream server` and a `noetl-stream worker`, each a process of its own, on the
    test's nats-server (provisioned by `bus`).
    """
    processes = Processes(nats_server.url, tmp_path)
    await processes.start("server", "server")
    await processes.start("worker", "worker")
    try:
        yield processes
    finally:
        await processes.stop_all()
