"""Metrics, traces, JSON logs and health against real processes: `noetl-stream server` and
`noetl-stream worker` started as a user starts them, on the test's nats-server, a parent
playbook with child playbooks run through the CLI.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from cli import run_cli

from noetl_stream.bus.connection import Bus
from noetl_stream.bus.nats_server import NatsServer
from noetl_stream.testing.waiting import assert_eventually

pytestmark = pytest.mark.e2e

CLI = Path(sys.executable).with_name("noetl-stream")
ROOT = Path(__file__).resolve().parents[2]
PARENT = ROOT / "playbooks" / "examples" / "subplaybook" / "parent.yaml"
OBSERVED = ROOT / "tests" / "integration" / "playbooks" / "observed.yaml"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Service:
    proc: asyncio.subprocess.Process
    metrics_url: str
    stderr_path: Path

    def stderr(self) -> str:
        return self.stderr_path.read_text()


@contextlib.asynccontextmanager
async def service(kind: str, nats_url: str, tmp: Path, *extra: str,
                  env: dict[str, str] | None = None) -> AsyncIterator[Service]:
    """`noetl-stream <kind>` as its own process, with /metrics on a free port, until the block ends."""
    port = free_port()
    err = tmp / f"{kind}.stderr"
    with err.open("wb") as stderr:
        proc = await asyncio.create_subprocess_exec(
            str(CLI), "-v", kind, "--nats-url", nats_url, "--metrics", f"127.0.0.1:{port}",
            "--log-format", "json", *extra, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL, stderr=stderr, env={**os.environ, **(env or {})})
    svc = Service(proc, f"http://127.0.0.1:{port}", err)
    try:
        async def up() -> None:
            assert proc.returncode is None, svc.stderr()
            assert "running" in svc.stderr()
            await scrape(svc.metrics_url + "/metrics")

        await assert_eventually(up, timeout_s=30, interval_s=0.1)
        yield svc
    finally:
        await stop(proc)


async def stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), 20)
        except TimeoutError:
            proc.kill()
            await proc.wait()


async def scrape(url: str) -> str:
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        assert response.status == 200, response.status
        return await response.text()


async def health(url: str) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as session, session.get(url + "/health") as response:
        return response.status, await response.json()


def sample(text: str, name: str, **labels: str) -> float | None:
    """The value of the series `name{labels}` (labels in any order), or None."""
    for line in text.splitlines():
        match = re.fullmatch(r"([a-zA-Z_:]+)(?:\{(.*)\})? (\S+)", line)
        if not match or match.group(1) != name:
            continue
        found = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', match.group(2) or ""))
        if found == labels:
            return float(match.group(3))
    return None


def spans(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


async def test_metrics_traces_logs_and_health_of_real_processes(
        bus: Bus, nats_server: NatsServer, tmp_path: Path) -> None:
    url = nats_server.url
    server_spans, worker_spans = tmp_path / "server.spans", tmp_path / "worker.spans"
    async with service("server", url, tmp_path,
                       env={"NOETL_STREAM_TRACE_FILE": str(server_spans)}) as srv:
        async with service("worker", url, tmp_path, "--python-processes", "2",
                           env={"NOETL_STREAM_TRACE_FILE": str(worker_spans)}) as wrk:
            run = await run_cli("run", str(PARENT), "--nats-url", url, "--json", "--quiet")
            assert run.returncode == 0, run.stderr
            parent_id = run.summary["execution_id"]
            status, body = await health(srv.metrics_url)
            assert (status, body["status"], body["problems"]) == (200, "ok", [])

            async def counted() -> tuple[str, str]:
                server_text = await scrape(srv.metrics_url + "/metrics")
                worker_text = await scrape(wrk.metrics_url + "/metrics")
                parent, child = "examples/subplaybook/parent", "examples/subplaybook/child"
                assert sample(server_text, "noetl_executions_started_total", playbook=parent) == 1
                assert sample(server_text, "noetl_executions_started_total", playbook=child) == 3
                assert sample(server_text, "noetl_executions_ended_total", playbook=child,
                              status="completed") == 3
                assert sample(server_text, "noetl_execution_duration_seconds_count",
                              playbook=parent, status="completed") == 1
                assert sample(worker_text, "noetl_steps_total", playbook=parent,
                              kind="playbook", pool="default", status="ok") == 3
                assert sample(worker_text, "noetl_step_duration_seconds_count", playbook=child,
                              kind="python", pool="default", status="ok") == 3
                return server_text, worker_text

            server_text, worker_text = await assert_eventually(counted, timeout_s=10)
            # Each process counts only its own work, and both expose process metrics.
            assert sample(worker_text, "noetl_executions_started_total",
                          playbook="examples/subplaybook/parent") is None
            assert sample(server_text, "noetl_steps_total", playbook="examples/subplaybook/parent",
                          kind="playbook", pool="default", status="ok") is None
            for text in (server_text, worker_text):
                assert sample(text, "process_resident_memory_bytes") is not None
            assert sample(server_text, "noetl_processes", role="worker", pool="default") == 1
            assert sample(server_text, "noetl_pool_pending_commands", pool="default") == 0
            # A bad request: the server logs a warning, as one JSON object on one line.
            await bus.js.publish(bus.topology.execute_request_subject(), b'{"playbook": 1}')

            def warned() -> None:
                assert "rejected execution request" in srv.stderr()

            await assert_eventually(warned)

        # The worker is gone: its pool's live-process series reads 0, and a command waits.
        async def no_worker() -> None:
            text = await scrape(srv.metrics_url + "/metrics")
            assert sample(text, "noetl_processes", role="worker", pool="default") == 0

        await assert_eventually(no_worker, timeout_s=10)
        stuck = await run_cli("run", str(OBSERVED), "--nats-url", url, "--quiet", "--json",
                              "--timeout", "4", env={"NOETL_STREAM_PICKUP_WARN_S": "1"})
        assert stuck.returncode == 4  # --timeout: the execution keeps waiting
        assert "no worker has taken a command of" in stuck.stderr
        assert "pool 'default' has 1 waiting and no live worker" in stuck.stderr
        status, body = await health(srv.metrics_url)
        assert status == 503 and body["status"] == "degraded"
        assert body["problems"] == ["pool 'default' has 1 pending command(s) and no live worker"]
        assert body["pools"] == [{"pool": "default", "pending_commands": 1, "live_workers": 0}]
        waiting = await run_cli("executions", "list", "--status", "running", "--json",
                                "--nats-url", url)
        [stuck_id] = [e["execution_id"] for e in json.loads(waiting.stdout)]
        said = await run_cli("status", stuck_id, "--nats-url", url)
        assert "pool 'default' has no live worker" in said.stdout

        server_log = srv.stderr()
    worker_log = wrk.stderr()

    # JSON logs: every log record line is one JSON object with time, level, logger, message.
    records = [json.loads(line) for line in (server_log + worker_log).splitlines()
               if line.startswith("{")]
    assert any(r["level"] == "WARNING" and r["logger"] == "noetl_stream.server"
               and r["message"].startswith("rejected execution request") for r in records), server_log
    for record in records:
        assert {"time", "level", "logger", "message"} <= set(record)
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT[\d:.]+Z", record["time"])
    assert not [line for line in (server_log + worker_log).splitlines()
                if re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ ", line)], "a text log line"

    # Traces: one trace for the parent and its children, across both processes.
    by_server, by_worker = spans(server_spans), spans(worker_spans)
    assert {s["service"] for s in by_server} == {"noetl-stream-server"}
    assert {s["service"] for s in by_worker} == {"noetl-stream-worker-default"}
    roots = [s for s in by_server if s["attributes"].get("noetl.execution_id") == parent_id]
    [root] = roots
    assert root["name"] == "execution examples/subplaybook/parent" and root["parent_id"] is None
    trace_id = root["trace_id"]
    children = [s for s in by_server if s["name"] == "execution examples/subplaybook/child"]
    assert len(children) == 3
    family = [s for s in by_server + by_worker if s["trace_id"] == trace_id]
    by_id = {s["span_id"]: s for s in family}
    steps = [s for s in family if s["name"].startswith("step ")]
    tasks = [s for s in family if s["name"].startswith("task ")]
    # parent: 3 loop iterations + summary; each child: one step
    assert len(steps) == 4 + 3 and len(tasks) == 4 + 3
    for step in steps:
        assert by_id[step["parent_id"]]["name"].startswith("execution "), step
    for task in tasks:
        assert by_id[task["parent_id"]]["name"].startswith("step "), task
    for child in children:
        launcher = by_id[child["parent_id"]]  # the parent's `playbook` task span
        assert launcher["name"] == "task start_task" and launcher["attributes"]["noetl.tool.kind"] \
            == "playbook"
        assert by_id[launcher["parent_id"]]["attributes"]["noetl.execution_id"] == parent_id
    assert root["start_ns"] <= min(s["start_ns"] for s in steps)
    # The worker's span also covers acknowledging the command, after the server may have ended
    # the execution: only the starts are ordered.
    assert root["end_ns"] >= max(s["start_ns"] for s in steps)


async def test_a_worker_s_health_says_when_its_nats_connection_passes_nothing(
        nats_server: NatsServer, tmp_path: Path) -> None:
    async with service("worker", nats_server.url, tmp_path) as wrk:
        status, body = await health(wrk.metrics_url)
        assert (status, body) == (200, {"status": "ok"})
        # nats-server stopped (not gone): the connection stays open and carries nothing, as in a
        # hung worker's view; the probe answers 503 instead of hanging.
        assert nats_server.process is not None
        nats_server.process.send_signal(signal.SIGSTOP)
        try:
            status, body = await asyncio.wait_for(health(wrk.metrics_url), 10)
        finally:
            nats_server.process.send_signal(signal.SIGCONT)
        assert status == 503 and body["status"] == "degraded"
        assert body["problems"] == ["no round trip to NATS within 3 s (FlushTimeoutError)"]

        async def healthy_again() -> None:
            assert await health(wrk.metrics_url) == (200, {"status": "ok"})

        await assert_eventually(healthy_again, timeout_s=30, interval_s=0.5)
