"""`run` never hides how an execution ended: `-q` still says why it failed, `--timeout` names
the execution that keeps running (exit 4; on the embedded stack, when it goes on), and
`--detach` hands back the id at once."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest
from cli import CLI, PLAYBOOKS, run_cli, run_playbook

from noetl_stream.bus.nats_server import NatsServer
from noetl_stream.testing.waiting import assert_eventually

pytestmark = pytest.mark.e2e

LISTENING = PLAYBOOKS / "cli_rough_edges_listening.yaml"


async def test_a_quiet_failed_run_still_says_why_in_one_line() -> None:
    out = await run_cli("run", str(PLAYBOOKS / "fail_unhandled.yaml"), "--quiet")
    assert out.returncode == 1
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert "failed" in lines[0] and "disk quota exceeded" in lines[0] and "boom" in lines[0]


async def test_a_quiet_json_run_keeps_stdout_a_single_document() -> None:
    out = await run_playbook("fail_unhandled.yaml")
    assert out.returncode == 1
    assert out.summary["status"] == "failed"
    assert "disk quota exceeded" in out.stderr


async def test_a_timeout_on_the_embedded_stack_says_when_the_execution_goes_on() -> None:
    # The embedded server and worker stop with the command: the execution waits for services
    # on that nats-server; `watch ID` without a URL, which it used to suggest, is refused.
    out = await run_cli("run", str(LISTENING), "--quiet", "--timeout", "2", timeout_s=60)

    assert out.returncode == 4, out.stderr
    line = out.stderr.strip().splitlines()[-1]
    assert line.startswith("noetl-stream: execution ") and "did not end within 2s; it goes on " \
        "when a server and a worker run on this home's nats-server" in line, line
    assert "keeps running" not in line and "watch" not in line


@pytest.mark.parametrize("seconds", ["0", "-1"])
async def test_a_timeout_that_is_no_wait_is_a_usage_error(seconds: str) -> None:
    out = await run_cli("run", str(LISTENING), "--timeout", seconds)

    assert out.returncode == 2
    assert "Invalid value for '--timeout'" in out.stderr and "Traceback" not in out.stderr


async def test_timeout_exits_4_with_the_execution_that_keeps_running(
        nats_server: NatsServer) -> None:
    url = nats_server.url
    server = await asyncio.create_subprocess_exec(
        str(CLI), "server", "--nats-url", url, stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL)
    worker = await asyncio.create_subprocess_exec(
        str(CLI), "worker", "--nats-url", url, stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL)
    try:
        waited = await run_cli("run", str(LISTENING), "--nats-url", url, "--quiet",
                               "--timeout", "3")
        assert waited.returncode == 4, waited.stderr
        line = waited.stderr.strip().splitlines()[-1]
        assert "did not end within 3s and keeps running" in line
        execution_id = line.split("execution ")[1].split()[0]
        assert execution_id.isdigit()

        detached = await run_cli("run", str(LISTENING), "--nats-url", url, "--detach")
        assert detached.returncode == 0, detached.stderr
        detached_id = detached.stdout.strip()
        assert detached_id.isdigit() and detached_id != execution_id

        # Both go on after their `run` exited: a signal ends each.
        for eid in (execution_id, detached_id):
            async def signal_heard(eid: str = eid) -> None:
                sent = await run_cli("signal", eid, "approve", "--nats-url", url)
                assert sent.returncode == 0, sent.stderr

            await assert_eventually(signal_heard, timeout_s=30, interval_s=0.5)
            status = await run_cli("watch", eid, "--nats-url", url, "--json", timeout_s=30)
            assert status.returncode == 0, status.stderr
            assert '"event_type": "execution.completed"' in status.stdout.replace('":"', '": "')
    finally:
        for proc in (worker, server):
            proc.send_signal(signal.SIGTERM)
            await proc.wait()


async def test_detach_on_the_embedded_stack_is_refused() -> None:
    out = await run_cli("run", str(LISTENING), "--detach")
    assert out.returncode == 2
    assert "--detach needs --nats-url or --server" in out.stderr
    assert "Traceback" not in out.stderr




async def test_sigterm_to_run_stops_its_embedded_nats_server(tmp_path: Path) -> None:
    home = tmp_path / "home"
    proc = await asyncio.create_subprocess_exec(
        str(CLI), "run", str(LISTENING), stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "NOETL_STREAM_HOME": str(home), "PYTHONUNBUFFERED": "1"})
    assert proc.stderr is not None
    seen = b""
    while b"approval" not in seen:
        seen += await asyncio.wait_for(proc.stderr.readline(), 30)
    pid_of_nats = _nats_servers_under(home)
    assert len(pid_of_nats) == 1
    proc.send_signal(signal.SIGTERM)
    rest = (await asyncio.wait_for(proc.stderr.read(), 30)).decode()
    assert await proc.wait() == 130, rest
    assert "keeps running" in rest and "Traceback" not in rest
    assert _nats_servers_under(home) == []


def _nats_servers_under(home: Path) -> list[int]:
    """The nats-server processes whose command line names a file under `home`."""
    found = []
    for proc_dir in Path("/proc").iterdir():
        if not proc_dir.name.isdigit():
            continue
        try:
            argv = (proc_dir / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"nats-server") and any(str(home).encode() in a for a in argv):
            found.append(int(proc_dir.name))
    return found
