"""Every execution an e2e test makes on its nats-server must verify: after the test, each state
committed there is rebuilt from its events through the router and compared with it
(`noetl-stream verify`, noetl_stream/testing/verifying.py); a difference fails the test, naming
the execution and the field. A test whose states are not the consequence of their events (a state
written by hand, or by another release) says so with `@pytest.mark.unverified("why")`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from noetl_stream.bus.connection import connect
from noetl_stream.bus.nats_server import NatsServer
from noetl_stream.testing.verifying import differences, verify_every_execution

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
