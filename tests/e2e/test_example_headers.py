"""Every example under playbooks/examples/ runs as its header says: each header line

    #   noetl-stream run playbooks/examples/X.yaml [ARGS]   # completed|failed: what it shows

is run from the repository's root (with a stand-in API the header starts, `python3
playbooks/examples/stand_ins/api.py PORT &`, on a free port instead) and must end as it claims.
The approval example waits for a signal from another shell: its header's commands run against
a nats-server with a server and a worker.
"""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from cli import CLI, run_cli

from noetl_stream.bus.nats_server import NatsServer, free_port
from noetl_stream.testing.waiting import assert_eventually

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "playbooks" / "examples"
CLAIM = re.compile(r"^#\s+noetl-stream run (\S+)(.*?)\s+#\s+(completed|failed)\b")
STAND_IN = re.compile(r"^#\s+python3 (playbooks/examples/\S+\.py) (\d+) &$")
WAITS_FOR_A_SIGNAL = {"approval.yaml"}


def header(path: Path) -> list[str]:
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line)
    return lines


def claims() -> list[tuple[str, list[str], str, str | None, str | None]]:
    """(file, run args, status, stand-in script, its port) of every claim in every header."""
    found = []
    for path in sorted(EXAMPLES.rglob("*.yaml")):
        lines = header(path)
        stand_in = next((m.groups() for m in map(STAND_IN.match, lines) if m), (None, None))
        for match in filter(None, map(CLAIM.match, lines)):
            target, args, status = match.groups()
            assert ROOT / target == path, f"{path.name}'s header runs {target}"
            found.append((str(path.relative_to(EXAMPLES)), [target, *shlex.split(args)], status,
                          *stand_in))
    return found


def is_trigger(path: Path) -> bool:
    """A `kind: Trigger` document: applied, not run (tests/e2e/test_triggers.py runs them)."""
    return "\nkind: Trigger\n" in path.read_text()


def test_every_example_header_says_how_to_run_it() -> None:
    claimed = {c[0] for c in claims()}
    every = {str(p.relative_to(EXAMPLES)) for p in EXAMPLES.rglob("*.yaml") if not is_trigger(p)}
    assert every - claimed == WAITS_FOR_A_SIGNAL


async def stand_in(script: str | None) -> AsyncIterator[int | None]:
    if script is None:
        yield None
        return
    port = free_port()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(ROOT / script), str(port), stderr=asyncio.subprocess.PIPE)
    try:
        assert proc.stderr is not None
        line = await asyncio.wait_for(proc.stderr.readline(), 10)
        assert f"127.0.0.1:{port}" in line.decode()
        yield port
    finally:
        proc.send_signal(signal.SIGINT)
        await proc.wait()


@pytest.mark.parametrize(("example", "args", "status", "script", "port"), claims(),
                         ids=lambda v: v if isinstance(v, str) and v.endswith(".yaml") else "")
async def test_each_example_ends_as_its_header_claims(
        example: str, args: list[str], status: str, script: str | None, port: str | None,
        tmp_path: Path) -> None:
    async for local_port in stand_in(script):
        if local_port is not None:
            args = [a.replace(f"localhost:{port}", f"127.0.0.1:{local_port}") for a in args]
        out = await run_cli("run", *args, "--json", "--quiet", cwd=ROOT, timeout_s=120,
                            env={"NOETL_STREAM_HOME": str(tmp_path / "home")})
        assert out.summary["status"] == status, out.stderr
        assert out.returncode == (0 if status == "completed" else 1)


async def test_the_approval_example_runs_as_its_header_says(nats_server: NatsServer) -> None:
    text = (EXAMPLES / "approval.yaml").read_text()
    url = nats_server.url
    assert "noetl-stream run playbooks/examples/approval.yaml --nats-url nats://localhost:4222" in text
    assert ("noetl-stream signal <execution_id> approve --data '{\"user\": \"ada\"}' --nats-url "
            "nats://localhost:4222") in text
    services = [await asyncio.create_subprocess_exec(
        str(CLI), kind, "--nats-url", url, stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL) for kind in ("server", "worker")]
    try:
        detached = await run_cli("run", "playbooks/examples/approval.yaml", "--nats-url", url,
                                 "--detach", cwd=ROOT)
        assert detached.returncode == 0, detached.stderr
        execution_id = detached.stdout.strip()

        async def approved() -> None:
            sent = await run_cli("signal", execution_id, "approve", "--data", '{"user": "ada"}',
                                 "--nats-url", url)
            assert sent.returncode == 0, sent.stderr

        await assert_eventually(approved, timeout_s=30, interval_s=0.5)

        async def shipped() -> None:
            status = await run_cli("status", execution_id, "--nats-url", url, "--json")
            report = json.loads(status.stdout)
            assert report["status"] == "completed", status.stdout
            assert report["result"] == {"shipped": 42, "approved_by": "ada"}

        await assert_eventually(shipped, timeout_s=30, interval_s=0.5)
    finally:
        for proc in services:
            proc.send_signal(signal.SIGTERM)
            await proc.wait()
