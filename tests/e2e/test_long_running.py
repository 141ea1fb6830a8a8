"""Work that runs far longer than NOETL_STREAM_RETENTION (4 s here), with `noetl-stream server` and
`noetl-stream worker` as separate processes: nothing of a running execution ages out (its timers,
its events, its commands waiting for a worker), and a finished one is purged after the retention.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from cli import run_cli
from nats.js.errors import KeyNotFoundError
from processes import Processes

from noetl_stream import jsonutil
from noetl_stream.bus.connection import Bus
from noetl_stream.bus.nats_server import NatsServer
from noetl_stream.services import submit_and_watch
from noetl_stream.state.kv_keys import bucket_keys
from noetl_stream.testing.waiting import assert_eventually
from playbook_files import playbook_path, read_playbook

pytestmark = pytest.mark.e2e

RETENTION_S = 4.0
WAITS = read_playbook("e2e", "retention_waits.yaml")


@pytest.fixture
async def processes(nats_server: NatsServer, tmp_path: Path) -> AsyncIterator[Processes]:
    procs = Processes(nats_server.url, tmp_path, {"NOETL_STREAM_RETENTION": f"{RETENTION_S:g}s"})
    try:
        yield procs
    finally:
        await procs.stop_all()


async def start_services(procs: Processes, *server_args: str) -> None:
    await procs.start("server", "server", *server_args)
    await procs.start("worker", "worker", "--python-processes", "1")


async def state_of(bus: Bus, execution_id: str) -> dict[str, Any] | None:
    if not await bucket_keys(bus.js, "noetl_executions", execution_id):
        return None
    try:
        value = (await (await bus.js.key_value("noetl_executions")).get(execution_id)).value
    except KeyNotFoundError:  # purged between the listing and the read: gone all the same
        return None
    return dict(jsonutil.loads(value or b"{}"))


async def stored_count(bus: Bus, stream: str, subjects: str) -> int:
    info = await bus.js.stream_info(stream, subjects_filter=subjects)
    return sum((info.state.subjects or {}).values())


async def purged_after_the_retention(bus: Bus, execution_id: str, ended_at: float) -> None:
    """The finished execution's state and events stay for the retention, then go."""
    async def gone() -> None:
        assert await state_of(bus, execution_id) is None
        assert await stored_count(bus, "NOETL_EVENTS", f"noetl.events.{execution_id}.>") == 0

    await assert_eventually(gone, timeout_s=30, interval_s=0.2)
    assert time.time() - ended_at >= RETENTION_S  # not before it was due


async def test_nothing_that_holds_work_or_history_has_an_age_limit(bus: Bus) -> None:
    for stream in ("NOETL_EVENTS", "NOETL_COMMANDS", "NOETL_REQUESTS", "NOETL_ROUTER",
                   "NOETL_ADVISORIES", "OBJ_noetl_results"):
        assert (await bus.js.stream_info(stream)).config.max_age in (0, None), stream


async def test_a_timer_three_retentions_ahead_fires(bus: Bus, processes: Processes,
                                                    nats_server: NatsServer) -> None:
    await start_services(processes)
    began = time.monotonic()
    ran = await run_cli("run", str(playbook_path("e2e", "long_timer.yaml")), "--json", "--quiet",
                        "--nats-url", nats_server.url, timeout_s=90)
    took = time.monotonic() - began
    assert ran.returncode == 0, ran.stderr
    summary = ran.summary
    assert summary["status"] == "completed", summary
    assert took >= 12.0
    execution_id = summary["execution_id"]
    state = await state_of(bus, execution_id)
    assert state is not None and state["ctx"]["fired"] == "later"
    await purged_after_the_retention(bus, execution_id, float(state["ended_at"]))


async def test_a_command_waits_for_its_pool_however_long_no_worker_is_alive(
        bus: Bus, processes: Processes, nats_server: NatsServer) -> None:
    url = ["--nats-url", nats_server.url]
    declared = await run_cli("init", "--pool", "late", *url)
    assert declared.returncode == 0, declared.stderr
    await start_services(processes)  # a worker of the default pool only
    run = asyncio.create_task(run_cli("run", str(playbook_path("e2e", "late_pool.yaml")),
                                      "--json", "--quiet", *url, timeout_s=120))

    async def waiting() -> None:
        assert await stored_count(bus, "NOETL_COMMANDS", "noetl.commands.late.>") == 1

    await assert_eventually(waiting, timeout_s=30)
    await asyncio.sleep(4 * RETENTION_S)
    await waiting()  # still there, with nobody to take it
    assert not run.done()

    await processes.start("late-worker", "worker", "--pool", "late", "--python-processes", "1")
    ran = await asyncio.wait_for(run, 90)
    assert ran.returncode == 0, ran.stderr
    assert ran.summary["status"] == "completed", ran.summary
    assert ran.summary["steps"]["start"]["result"] == {"ran": True}
    assert await stored_count(bus, "NOETL_COMMANDS", "noetl.commands.late.>") == 0


async def sse_event_types(port: int, execution_id: str) -> list[str]:
    """The event types the API's live events route sends, from the first to the last."""
    types: list[str] = []
    url = f"http://127.0.0.1:{port}/api/executions/{execution_id}/events/stream"
    async with aiohttp.ClientSession() as http, http.get(url) as resp:
        assert resp.status == 200
        async for line in resp.content:
            if line.startswith(b"data: "):
                types.append(str(jsonutil.loads(line[6:])["event_type"]))
    return types


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.mark.timeout(420)
async def test_a_three_minute_wait_keeps_its_whole_history(
        bus: Bus, processes: Processes, nats_server: NatsServer) -> None:
    url = ["--nats-url", nats_server.url]
    port = free_port()
    await start_services(processes, "--http", f"127.0.0.1:{port}", "--no-auth")
    execution_id = "longwait1"
    run = asyncio.create_task(submit_and_watch(
        bus, playbook_text=WAITS, playbook_file="waits.yaml", payload={},
        on_event=lambda e: None, execution_id=execution_id, timeout_s=400))

    async def waiting() -> None:
        state = await state_of(bus, execution_id)
        assert state is not None and "approval" in {
            r["step"] for r in state["runs"].values() if r["status"] == "running"}

    await assert_eventually(waiting, timeout_s=60)
    first = await stored_count(bus, "NOETL_EVENTS", f"noetl.events.{execution_id}.>")
    assert first > 0
    # 180 s: 45 retention periods, 180 sweeps of every server; the history never shrinks.
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        await asyncio.sleep(10)
        assert await stored_count(bus, "NOETL_EVENTS", f"noetl.events.{execution_id}.>") >= first
        await waiting()

    async with aiohttp.ClientSession() as http, http.get(
            f"http://127.0.0.1:{port}/api/executions/{execution_id}/events",
            params={"limit": "1000"}) as resp:
        assert resp.status == 200
        page = await resp.json()
    assert page["items"][0]["event_type"] == "execution.started"
    assert len(page["items"]) == await stored_count(bus, "NOETL_EVENTS",
                                                    f"noetl.events.{execution_id}.>")
    # Every reader joins now, reads the history from its first event, and follows it to the end.
    logs = asyncio.create_task(run_cli("logs", execution_id, "--follow", "--json", *url,
                                       timeout_s=120))
    watched = asyncio.create_task(run_cli("watch", execution_id, *url, timeout_s=120))
    served = asyncio.create_task(sse_event_types(port, execution_id))
    await asyncio.sleep(3)
    assert not (logs.done() or watched.done() or served.done())
    signalled = await run_cli("signal", execution_id, "approve", *url)
    assert signalled.returncode == 0, signalled.stderr
    summary = await asyncio.wait_for(run, 60)
    assert summary["status"] == "completed", summary
    stored = await stored_count(bus, "NOETL_EVENTS", f"noetl.events.{execution_id}.>")
    assert stored > first

    logged_run = await asyncio.wait_for(logs, 120)
    assert logged_run.returncode == 0, logged_run.stderr
    logged = [json.loads(line) for line in logged_run.stdout.splitlines()]
    assert len(logged) == stored
    assert logged[0]["event_type"] == "execution.started"
    assert logged[-1]["event_type"] == "execution.completed"
    assert logged[-1]["timestamp"] - logged[0]["timestamp"] >= 180

    watch_run = await asyncio.wait_for(watched, 120)
    assert watch_run.returncode == 0, watch_run.stderr
    for step in ("start", "approval", "done"):
        assert f"✓ {step}" in watch_run.stdout, watch_run.stdout

    assert await asyncio.wait_for(served, 120) == [e["event_type"] for e in logged]

    state = await state_of(bus, execution_id)
    assert state is not None
    await purged_after_the_retention(bus, execution_id, float(state["ended_at"]))
