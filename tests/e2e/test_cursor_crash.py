"""`kill -9` of a worker in the middle of a cursor loop item: the item it had claimed is finished
by another worker, by the same iteration, once; no other iteration claims it.

The server and three workers run as `noetl-stream` processes on one NATS; the rows live in an
embedded PostgreSQL. The victim's task blocks until its worker is gone. Its command, never
acknowledged, is redelivered after the pool's AckWait (30 s): the claim ledger gives the new
delivery the row the dead one had claimed (tools/claims.py).
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from cli import CLI

from noetl_stream.bus.connection import Bus, connect
from noetl_stream.bus.provision import provision
from noetl_stream.bus.watcher import ExecutionWatch
from noetl_stream.messages import ExecutionRequest, RequestReply
from noetl_stream.testing.events import stored_events
from noetl_stream.testing.nats import run_nats_server
from noetl_stream.testing.postgres import PostgresServer, run_postgres_server
from noetl_stream.testing.waiting import assert_eventually
from noetl_stream.tools.claims import LEDGER
from playbook_files import read_playbook

pytestmark = pytest.mark.e2e

JOBS = 20
VICTIM = 5

PLAYBOOK = read_playbook("e2e", "cursor_crash.yaml")


class Processes:
    """A `noetl-stream server` and workers as separate processes on one NATS."""

    def __init__(self, url: str, logs: Path) -> None:
        self.url = url
        self.logs = logs
        self.procs: list[asyncio.subprocess.Process] = []

    async def start(self, role: str, *extra: str) -> None:
        log = open(self.logs / f"{role}-{len(self.procs)}.log", "wb")  # noqa: SIM115
        proc = await asyncio.create_subprocess_exec(
            str(CLI), role, "--nats-url", self.url, *extra, stdin=asyncio.subprocess.DEVNULL,
            stdout=log, stderr=log)
        log.close()
        self.procs.append(proc)

    async def stop(self) -> None:
        for proc in self.procs:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            await proc.wait()


@pytest.fixture
async def nats_bus(tmp_path: Path) -> AsyncIterator[Bus]:
    async with run_nats_server(tmp_path / "nats") as server:
        bus = await connect(server.url, name="cursor-crash-test")
        try:
            await provision(bus)
            yield bus
        finally:
            await bus.close()


@pytest.fixture
async def postgres() -> AsyncIterator[PostgresServer]:
    async with run_postgres_server() as server:
        yield server


async def sql(dsn: str, query: str) -> list[dict[str, Any]]:
    conn = await asyncpg.connect(dsn)
    try:
        return [dict(r) for r in await conn.fetch(query)]
    finally:
        await conn.close()


async def submit(bus: Bus, execution_id: str, workload: dict[str, Any]) -> None:
    inbox = bus.nc.new_inbox()
    sub = await bus.nc.subscribe(inbox, max_msgs=1)
    request = ExecutionRequest(execution_id=execution_id, playbook=PLAYBOOK,
                               playbook_file="cursor_crash.yaml", payload=workload, reply_to=inbox)
    await bus.nc.publish("noetl.requests.execute", request.model_dump_json().encode())
    reply = RequestReply.model_validate_json((await sub.next_msg(timeout=30)).data)
    assert reply.accepted, reply.errors


@pytest.mark.timeout(150)
async def test_kill_9_of_a_worker_mid_item_finishes_its_claimed_item_once(
        nats_bus: Bus, postgres: PostgresServer, tmp_path: Path, shared_folder: Path) -> None:
    dsn = await postgres.create_database("cursor_crash")
    await sql(dsn, "CREATE TABLE jobs (id int PRIMARY KEY, status text NOT NULL DEFAULT 'pending')")
    await sql(dsn, "CREATE TABLE done (seq serial PRIMARY KEY, job int NOT NULL, "
                   "iteration int NOT NULL)")
    await sql(dsn, f"INSERT INTO jobs (id) SELECT generate_series(1, {JOBS})")
    marker = shared_folder / "victim"  # written by the step, as its slot uid
    execution_id = "cursorcrash1"
    seen: list[dict[str, Any]] = []
    watch = ExecutionWatch(nats_bus, execution_id, seen.append)
    await watch.start()
    url = str(nats_bus.nc.connected_url.geturl()) if nats_bus.nc.connected_url else ""
    processes = Processes(url, tmp_path)
    await processes.start("server")
    # One command per worker: the kill then cuts only the victim's item. With two, the victim's
    # worker could die between another item's commit and its outcome, and that item would
    # rightly run again (tools are at-least-once), which this test does not measure.
    for _ in range(3):
        await processes.start("worker", "--concurrency", "1", "--python-processes", "2")
    try:
        await submit(nats_bus, execution_id, {"dsn": dsn, "victim": VICTIM, "marker": str(marker)})

        def victim_held() -> tuple[int, int]:
            assert marker.exists()
            worker, index = marker.read_text().split()
            return int(worker), int(index)

        parent_pid, victim_iteration = await assert_eventually(victim_held, timeout_s=60)
        workers = [p.pid for p in processes.procs[1:]]
        worker_pid = worker_above(parent_pid, workers)  # the step's parent is its fork server
        os.kill(worker_pid, signal.SIGKILL)
        final = await watch.wait(timeout_s=120)
    finally:
        await watch.stop()
        await processes.stop()

    assert final["event_type"] == "execution.completed", final.get("error")
    done = await sql(dsn, "SELECT job, iteration FROM done ORDER BY job")
    assert [d["job"] for d in done] == list(range(1, JOBS + 1))  # every job once, none twice
    assert {d["job"]: d["iteration"] for d in done}[VICTIM] == victim_iteration
    statuses = await sql(dsn, "SELECT DISTINCT status FROM jobs")
    assert statuses == [{"status": "done"}]
    claims = await sql(dsn, f"SELECT claim_key FROM {LEDGER} WHERE (claimed_row->>'id')::int = {VICTIM}")
    assert claims == [{"claim_key": f"claim:{execution_id}.drain.1:{victim_iteration}"}]
    assert sorted(final["steps"]["drain"]["result"], key=lambda r: r["rows"][0]["id"]) == [
        {"columns": ["id"], "rows": [{"id": j}], "row_count": 1, "statement_count": 2,
         "command_0": {"affected_rows": 1}}
        for j in range(1, JOBS + 1)]

    stored = await stored_events(nats_bus.js, execution_id)
    redelivered = [e for e in stored if e["event_type"] == "task.redelivered"
                   and e["iteration"] == victim_iteration]
    assert redelivered, "the victim's command should have come back to another worker"
    outcomes = Counter(e["iteration"] for e in stored if e["event_type"] == "loop.iteration.done")
    assert set(outcomes.values()) == {1}
    (victim_done,) = [e for e in stored if e["event_type"] == "loop.iteration.done"
                      and e["iteration"] == victim_iteration]
    assert victim_done["cursor"] == {"exhausted": False, "replayed": True}


def worker_above(pid: int, workers: list[int]) -> int:
    """The worker process `pid` is, or runs under (a python step's parent is the worker's fork
    server, a child of the worker)."""
    while pid > 1:
        if pid in workers:
            return pid
        stat = Path(f"/proc/{pid}/stat").read_text()
        pid = int(stat.rsplit(")", 1)[1].split()[1])  # the field after the state: the parent
    raise AssertionError(f"no worker of {workers} above the step")
