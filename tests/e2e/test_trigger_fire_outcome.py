"""`trigger fire` says what the fire came to: the execution a server started for it, or, with
exit 1, why none started (a subject trigger's payload reads `message`, which a manual fire has
none of). Real nats-server, `noetl-stream server` and `worker` processes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from cli import run_cli
from processes import RoleProcess

from noetl_stream import ids
from noetl_stream.bus.nats_server import NatsServer

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "playbooks" / "examples" / "triggers"


@pytest.fixture
async def stack(nats_server: NatsServer, tmp_path: Path) -> AsyncIterator[None]:
    services = [RoleProcess(role, nats_server.url, tmp_path) for role in ("server", "worker")]
    for service in services:
        await service.start()
    out = await run_cli("register", str(EXAMPLES / "report.yaml"), "--nats-url", nats_server.url)
    assert out.returncode == 0, out.stderr
    try:
        yield
    finally:
        for service in services:
            await service.stop()


async def test_fire_names_the_execution_a_server_started(stack: None, nats_server: NatsServer
                                                         ) -> None:
    url = nats_server.url
    applied = await run_cli("trigger", "apply", str(EXAMPLES / "nightly.yaml"), "--nats-url", url)
    assert applied.returncode == 0, applied.stderr
    out = await run_cli("trigger", "fire", "nightly", "--wait", "30", "--nats-url", url)
    assert out.returncode == 0, out.stderr
    words = out.stdout.split()
    assert words[:4] == ["trigger", "nightly", "started", "execution"], out.stdout
    execution_id, nominal = words[4], words[-1]
    assert execution_id == ids.derived_execution_id("trigger", "nightly", nominal)
    status = await run_cli("status", execution_id, "--nats-url", url)
    assert status.returncode == 0, status.stderr


async def test_a_fire_that_starts_nothing_exits_1_with_the_reason(stack: None,
                                                                  nats_server: NatsServer) -> None:
    url = nats_server.url
    applied = await run_cli("trigger", "apply", str(EXAMPLES / "big_orders.yaml"), "--nats-url", url)
    assert applied.returncode == 0, applied.stderr
    out = await run_cli("trigger", "fire", "big_orders", "--wait", "30", "--nats-url", url)
    assert out.returncode == 1, (out.stdout, out.stderr)
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert "no execution started" in lines[0] and "message" in lines[0], lines[0]


async def test_without_a_server_fire_says_so_instead_of_fired(nats_server: NatsServer) -> None:
    url = nats_server.url
    registered = await run_cli("register", str(EXAMPLES / "report.yaml"), "--nats-url", url)
    assert registered.returncode == 0, registered.stderr
    applied = await run_cli("trigger", "apply", str(EXAMPLES / "nightly.yaml"), "--nats-url", url)
    assert applied.returncode == 0, applied.stderr
    out = await run_cli("trigger", "fire", "nightly", "--wait", "1", "--nats-url", url)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("trigger nightly fired for "), out.stdout
    assert "no server started execution" in out.stderr, out.stderr
