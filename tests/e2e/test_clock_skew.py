"""`noetl-stream server` with its clock an hour behind, then an hour ahead, of nats-server's (by
libfaketime), beside a worker on the right time: step timeouts are measured on nats-server's
clock, so a 30 s timeout does not fire early and a hung step's 5 s timeout is not late."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from cli import CLI

from noetl_stream import jsonutil
from noetl_stream.bus.connection import Bus, connect
from noetl_stream.bus.provision import provision
from noetl_stream.services import run_services, submit_and_watch
from noetl_stream.testing import faketime
from noetl_stream.testing.nats import run_nats_server

pytestmark = pytest.mark.e2e

HEAD = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: skew}\nworkflow:\n"
WITHIN_ITS_TIMEOUT = HEAD + """\
  - step: start
    spec: {timeout: 30}
    tool:
      kind: python
      code: |
        import time
        time.sleep(3)
        result = "in time"
"""
HUNG = HEAD + """\
  - step: start
    spec: {timeout: 5}
    tool: {kind: noop}
"""


def skewed_env(offset: str) -> dict[str, str]:
    if faketime.library() is None:
        pytest.fail("this test needs libfaketime: apt-get install -y faketime (`make test` "
                    "installs it when run as root)")
    env = faketime.skewed_env(offset)
    # The skew must take: a process under it reads a clock about an hour off.
    seen = float(subprocess.run([sys.executable, "-c", "import time; print(time.time())"],
                                env=env, capture_output=True, text=True, check=True).stdout)
    assert abs(abs(seen - time.time()) - 3600) < 60, seen - time.time()
    return env


@asynccontextmanager
async def skewed_server(tmp_path: Path, offset: str) -> AsyncIterator[Bus]:
    async with run_nats_server(tmp_path / "nats") as nats:
        bus = await connect(nats.url, name="skew-test")
        log = open(tmp_path / "server.log", "wb")  # noqa: SIM115
        proc = await asyncio.create_subprocess_exec(
            str(CLI), "server", "--nats-url", nats.url, env=skewed_env(offset),
            stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=log)
        log.close()
        try:
            await provision(bus)
            yield bus
        finally:
            proc.terminate()
            await proc.wait()
            await bus.close()


async def test_a_server_an_hour_behind_does_not_fire_a_timeout_early(tmp_path: Path) -> None:
    async with skewed_server(tmp_path, "-1h") as bus, run_services(bus, server=False,
                                                                   python_children=1):
        final = await submit_and_watch(bus, playbook_text=WITHIN_ITS_TIMEOUT,
                                       playbook_file="skew.yaml", payload={},
                                       on_event=lambda _e: None, timeout_s=60)

    assert final["status"] == "completed", (final.get("error"), (tmp_path / "server.log")
                                            .read_text()[-2000:])
    assert final["result"] == "in time"


async def test_a_server_an_hour_ahead_still_ends_a_hung_step_on_time(tmp_path: Path) -> None:
    async with skewed_server(tmp_path, "+1h") as bus:
        decl = bus.topology.pool_consumer("default")
        events: list[dict[str, Any]] = []
        started = time.monotonic()
        run = asyncio.create_task(submit_and_watch(
            bus, playbook_text=HUNG, playbook_file="skew.yaml", payload={},
            on_event=events.append, timeout_s=60))
        # A worker that takes the command and never answers.
        silent = await bus.js.pull_subscribe_bind(decl.durable, stream=decl.stream)
        (taken,) = await silent.fetch(1, timeout=30)
        assert jsonutil.loads(taken.data)["step"] == "start"
        final = await run
        took = time.monotonic() - started
        await silent.unsubscribe()

    assert final["status"] == "failed", final
    assert final["steps"]["start"]["error"]["kind"] == "timeout"
    # The budget is 5 s plus a 2 s grace; schedules fire on whole seconds.
    assert 5 <= took < 20, took
