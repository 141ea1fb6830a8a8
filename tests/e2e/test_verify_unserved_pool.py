"""`verify` holds for an execution that failed because no worker serves its step's pool: the
server replaces the step's command by the step's failure, and the execution's own failure that
follows (of the same error kind) is not that command. Real nats-server, server and worker.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli import run_cli
from processes import Processes

from noetl_stream.bus.nats_server import NatsServer

pytestmark = pytest.mark.e2e

PLAYBOOK = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: unserved}
workflow:
  - step: start
    pool: nobody_serves_this
    tool: {kind: python, code: "result = 1"}
"""


async def test_an_execution_failed_for_an_unserved_pool_verifies(
        procs: Processes, nats_server: NatsServer, tmp_path: Path) -> None:
    url = ["--nats-url", nats_server.url]
    book = tmp_path / "unserved.yaml"
    book.write_text(PLAYBOOK)
    out = await run_cli("run", str(book), "--json", *url)
    assert out.returncode == 1, out.stderr
    assert 'no worker serves pool \\"nobody_serves_this\\"' in out.stdout, out.stdout
    execution_id = out.stdout.split('"execution_id":"', 1)[1].split('"', 1)[0]
    verified = await run_cli("verify", execution_id, *url)
    assert verified.returncode == 0, verified.stderr
    assert "equal to its" in verified.stdout, verified.stdout
