"""CLI commands given `--server`: a `noetl-stream server --http` process with authentication on,
a worker on the same nats-server, and the console script talking only HTTP to the server. `run`
prints the same JSON as over NATS; status, signal, cancel, watch and register work remotely;
a bad token or an unreachable server ends with a one-line message and the matching exit code."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from cli import PLAYBOOKS, CliResult, run_cli

from noetl_stream.api import open_authenticator
from noetl_stream.bus.connection import Bus
from noetl_stream.bus.nats_server import NatsServer, free_port
from noetl_stream.services import run_services
from noetl_stream.testing.waiting import assert_eventually
from playbook_files import read_playbook

pytestmark = pytest.mark.e2e

CLI = str(Path(sys.executable).parent / "noetl-stream")

# Waits for a signal while a slow step runs: something to inspect, signal and cancel.
WAITING = read_playbook("e2e", "cli_remote_waiting.yaml")

REGISTERED = read_playbook("e2e", "cli_remote_registered.yaml")


@dataclass(frozen=True)
class Remote:
    url: str
    key: str

    async def cli(self, *args: str, env: dict[str, str] | None = None) -> CliResult:
        return await run_cli(*args, "--server", self.url, "--token", self.key, env=env)

    async def get(self, path: str) -> dict[str, object]:
        async with aiohttp.ClientSession() as http, \
                http.get(self.url + path, headers={"Authorization": f"Bearer {self.key}"}) as resp:
            assert resp.status == 200, await resp.text()
            body: dict[str, object] = await resp.json()
            return body


@pytest.fixture
async def remote(bus: Bus, nats_server: NatsServer) -> AsyncIterator[Remote]:
    """A server process with the HTTP API (auth on), a worker, and an operator's API key."""
    auth = await open_authenticator(bus)
    await auth.users.add("ops", ["operator"], None)
    key, _ = await auth.keys.create("ops", ["operator"])
    port = free_port()
    server = await asyncio.create_subprocess_exec(
        CLI, "server", "--nats-url", nats_server.url, "--http", f"127.0.0.1:{port}",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL, env=dict(os.environ))
    url = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as http:
            async def healthy() -> None:
                try:
                    async with http.get(url + "/health") as resp:
                        assert resp.status == 200
                except aiohttp.ClientConnectionError as exc:
                    raise AssertionError("not listening yet") from exc

            await assert_eventually(healthy, timeout_s=30, interval_s=0.1)
        async with run_services(bus, server=False, worker=True, python_children=1):
            yield Remote(url, key)
    finally:
        server.send_signal(signal.SIGTERM)
        await asyncio.wait_for(server.wait(), 30)


async def test_run_over_http_prints_the_same_json_as_over_nats(
        remote: Remote, nats_server: NatsServer) -> None:
    hello = str(PLAYBOOKS / "hello.yaml")
    over_http = await remote.cli("run", hello, "--json", "--set", "name=api")
    over_nats = await run_cli("run", hello, "--json", "--quiet", "--set", "name=api",
                              "--nats-url", nats_server.url)

    assert over_http.returncode == over_nats.returncode == 0, over_http.stderr
    http_summary, nats_summary = over_http.summary, over_nats.summary
    assert http_summary["execution_id"] != nats_summary["execution_id"]
    del http_summary["execution_id"], nats_summary["execution_id"]
    assert http_summary == nats_summary
    assert http_summary["result"] == {"text": "HELLO API"}
    # The live progress is the NATS path's printer, fed from the event stream.
    assert "✓ shout" in over_http.stderr and "completed" in over_http.stderr

    plain = await remote.cli("run", hello, "--quiet")
    assert plain.returncode == 0, plain.stderr
    assert json.loads(plain.stdout) == {"text": "HELLO WORLD"}


async def test_failed_and_refused_runs_keep_their_exit_codes_over_http(
        remote: Remote, nats_server: NatsServer) -> None:
    failed = await remote.cli("run", str(PLAYBOOKS / "fail_unhandled.yaml"), "--json", "--quiet")
    assert failed.returncode == 1, failed.stderr
    assert failed.summary["status"] == "failed"
    assert (failed.summary["failed_step"], failed.summary["result"]) == ("boom", None)
    # Neither the API nor `status` passes the step before's result off as the execution's.
    execution_id = str(failed.summary["execution_id"])
    detail = await remote.get(f"/api/executions/{execution_id}")
    assert (detail["status"], detail["result"]) == ("failed", None)
    assert detail["steps"]["start"]["result"] == {"ok": True}  # type: ignore[index]
    for status in (await remote.cli("status", execution_id, "--json"),
                   await run_cli("status", execution_id, "--json", "--nats-url", nats_server.url)):
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["result"] is None

    children = await remote.cli("run", str(PLAYBOOKS / "subplaybook_parent.yaml"))
    assert children.returncode == 2
    assert "./subplaybook/child.yaml" in children.stderr and "register" in children.stderr


async def test_status_signal_watch_and_cancel_over_http(remote: Remote, tmp_path: Path) -> None:
    playbook = tmp_path / "waiting.yaml"
    playbook.write_text(WAITING)
    run = asyncio.create_task(remote.cli("run", str(playbook), "--json", "--quiet"))

    async def started() -> str:
        listed = await remote.get("/api/executions")
        items = listed["items"]
        assert isinstance(items, list) and len(items) == 1
        return str(items[0]["execution_id"])

    execution_id = await assert_eventually(started, timeout_s=30, interval_s=0.1)
    watch = asyncio.create_task(remote.cli("watch", execution_id, "--json"))

    async def slow_running() -> dict[str, object]:
        status = await remote.cli("status", execution_id, "--json")
        assert status.returncode == 0, status.stderr
        detail = json.loads(status.stdout)
        assert detail["steps"]["slow"]["status"] == "running"
        return dict(detail)

    detail = await assert_eventually(slow_running, timeout_s=30, interval_s=0.1)
    assert detail["status"] == "running"

    unheard = await remote.cli("signal", execution_id, "aprove")
    assert unheard.returncode == 2 and "409" in unheard.stderr, unheard.stderr
    assert "approve" in unheard.stderr and "--force" not in unheard.stdout
    forced = await remote.cli("signal", execution_id, "aprove", "--force")
    assert forced.returncode == 0, forced.stderr
    sent = await remote.cli("signal", execution_id, "approve", "--data", '{"by": "ops"}')
    assert sent.returncode == 0, sent.stderr
    assert f"signal.approve sent to {execution_id}" in sent.stdout

    async def done_completed() -> None:
        status = await remote.cli("status", execution_id, "--json")
        assert json.loads(status.stdout)["steps"]["done"]["status"] == "completed"

    await assert_eventually(done_completed, timeout_s=30, interval_s=0.1)
    human = await remote.cli("status", execution_id)
    assert f"execution {execution_id}: running" in human.stdout
    assert "step done: completed" in human.stdout

    cancelled = await remote.cli("cancel", execution_id, "--reason", "enough", "--wait")
    assert cancelled.returncode == 0, cancelled.stderr
    assert f"{execution_id} cancelled" in cancelled.stdout

    ran = await asyncio.wait_for(run, 60)
    assert ran.returncode == 1, ran.stderr
    assert ran.summary["status"] == "cancelled"
    assert ran.summary["steps"]["done"]["status"] == "completed"
    watched = await asyncio.wait_for(watch, 60)
    assert watched.returncode == 1, watched.stderr
    events = [json.loads(line) for line in watched.stdout.splitlines()]
    assert events[0]["event_type"] == "execution.started"
    assert events[-1]["event_type"] == "execution.cancelled"
    assert {"event_type": "signal.approve", "execution_id": execution_id,
            "data": {"by": "ops"}}.items() <= next(
        e for e in events if e["event_type"] == "signal.approve").items()

    again = await remote.cli("cancel", execution_id)
    assert again.returncode == 2
    assert "409" in again.stderr and "already ended (cancelled)" in again.stderr
    late = await remote.cli("signal", execution_id, "approve")
    assert late.returncode == 2 and "409" in late.stderr


async def test_register_over_http_puts_the_playbook_in_the_catalog(
        remote: Remote, tmp_path: Path) -> None:
    playbook = tmp_path / "registered.yaml"
    playbook.write_text(REGISTERED)

    out = await remote.cli("register", str(playbook))

    assert out.returncode == 0, out.stderr
    assert f"{playbook}: registered remote/registered version 1.0 (pb_" in out.stdout
    catalog = await remote.get("/api/catalog/remote/registered?version=1.0")
    assert catalog["content"] == REGISTERED
    listed = await remote.cli("catalog", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    [entry] = [e for e in json.loads(listed.stdout) if e["path"] == "remote/registered"]
    assert list(entry["versions"]) == ["1.0"] and entry["latest"].startswith("pb_")
    shown = await remote.cli("catalog", "show", "remote/registered", "--version", "1.0")
    assert shown.returncode == 0 and shown.stdout == REGISTERED.rstrip("\n") + "\n"
    missing = await remote.cli("catalog", "show", "remote/registered", "--version", "9")
    assert missing.returncode == 2 and 'playbook "remote/registered" version "9" is not' in \
        missing.stderr
    # This one names ./grandchild.yaml: a file the server cannot read.
    refused = await remote.cli("register", str(PLAYBOOKS / "subplaybook" / "child.yaml"))
    assert refused.returncode == 2
    assert "names child playbooks by file (./grandchild.yaml)" in refused.stderr


async def test_a_bad_token_or_no_server_ends_with_one_clear_line(remote: Remote) -> None:
    bad = await run_cli("signal", "some-id", "approve", "--server", remote.url,
                        "--token", "nsk_wrong")
    assert bad.returncode == 2
    lines = bad.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("noetl-stream: token refused: the server does not accept the "
                               "token given (--token or NOETL_STREAM_TOKEN); it is unknown, "
                               "expired or revoked (server answered 401: missing, unknown or expired")
    assert "pass --token" not in bad.stderr
    by_env_bad = await run_cli("run", str(PLAYBOOKS / "hello.yaml"), "--server", remote.url,
                               env={"NOETL_STREAM_TOKEN": "nsk_wrong"})
    assert by_env_bad.returncode == 2 and len(by_env_bad.stderr.strip().splitlines()) == 1
    assert "token refused" in by_env_bad.stderr and "pass --token" not in by_env_bad.stderr
    none = await run_cli("run", str(PLAYBOOKS / "hello.yaml"), "--server", remote.url)
    assert none.returncode == 2 and "not authenticated: pass --token or set" in none.stderr

    # The environment carries the server and the token as well as the options.
    by_env = await run_cli("status", "no-such-execution",
                           env={"NOETL_STREAM_SERVER": remote.url, "NOETL_STREAM_TOKEN": remote.key})
    assert by_env.returncode == 2
    assert 'server answered 404 not_found: execution "no-such-execution" not found' in by_env.stderr

    gone = await run_cli("watch", "x", "--server", f"http://127.0.0.1:{free_port()}",
                         "--token", remote.key)
    assert gone.returncode == 3 and "cannot reach the server" in gone.stderr
