"""`kill -9` of server and worker in the middle of an execution (ARCHITECTURE §6.5): after a
restart on the same NATS the execution finishes with the same results, and no step completes
twice, neither in the router's state nor in the event stream.

A worker killed mid-step leaves its command unacknowledged; the consumer redelivers it after its
AckWait (30 s in subjects/topology.yaml), and a server killed mid-batch leaves events that come
back the same way. That wait is most of this test's run time.
"""

from __future__ import annotations

import asyncio
import signal
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from cli import CLI

from noetl_stream.bus.connection import Bus, connect
from noetl_stream.bus.provision import provision
from noetl_stream.bus.watcher import ExecutionWatch
from noetl_stream.messages import ExecutionRequest, RequestReply
from noetl_stream.testing.events import stored_events
from noetl_stream.testing.nats import run_nats_server
from noetl_stream.testing.waiting import assert_eventually

pytestmark = pytest.mark.e2e

STEPS = 30


def sequential_playbook(steps: int) -> str:
    lines = ["apiVersion: noetl.io/v2", "kind: Playbook", "metadata:", "  name: thirty-steps",
             "workflow:"]
    for n in range(1, steps + 1):
        lines += [f"  - step: s{n:02d}", "    tool:", "      kind: python", "      input:",
                  f"        n: {n}", "      code: |", "        import time",
                  "        time.sleep(0.1)", '        result = {"i": n}']
        if n < steps:
            lines.append(f"    next: s{n + 1:02d}")
    return "\n".join(lines) + "\n"


class Services:
    """`noetl-stream server` and `noetl-stream worker` as separate processes on one NATS."""

    def __init__(self, url: str, logs: Path) -> None:
        self.url = url
        self.logs = logs
        self.procs: list[asyncio.subprocess.Process] = []
        self.starts = 0

    async def start(self) -> None:
        self.starts += 1
        for role, extra in (("server", []), ("worker", ["--python-processes", "2"])):
            log = open(self.logs / f"{role}-{self.starts}.log", "wb")  # noqa: SIM115
            proc = await asyncio.create_subprocess_exec(
                str(CLI), role, "--nats-url", self.url, *extra, stdin=asyncio.subprocess.DEVNULL,
                stdout=log, stderr=log)
            log.close()
            self.procs.append(proc)

    async def stop(self, sig: signal.Signals) -> None:
        for proc in self.procs:
            if proc.returncode is None:
                proc.send_signal(sig)
        for proc in self.procs:
            await proc.wait()
        self.procs = []


@pytest.fixture
async def nats_bus(tmp_path: Path) -> AsyncIterator[Bus]:
    async with run_nats_server(tmp_path / "nats") as server:
        bus = await connect(server.url, name="crash-test")
        try:
            await provision(bus)
            yield bus
        finally:
            await bus.close()


async def submit(bus: Bus, execution_id: str, playbook: str) -> None:
    inbox = bus.nc.new_inbox()
    sub = await bus.nc.subscribe(inbox, max_msgs=1)
    request = ExecutionRequest(execution_id=execution_id, playbook=playbook,
                               playbook_file="thirty.yaml", reply_to=inbox)
    await bus.nc.publish("noetl.requests.execute", request.model_dump_json().encode())
    reply = RequestReply.model_validate_json((await sub.next_msg(timeout=30)).data)
    assert reply.accepted, reply.errors


@pytest.mark.timeout(150)
async def test_kill_9_of_server_and_worker_mid_execution_finishes_each_step_once(
        nats_bus: Bus, tmp_path: Path) -> None:
    execution_id = "crash1"
    seen: list[dict[str, Any]] = []
    watch = ExecutionWatch(nats_bus, execution_id, seen.append)
    await watch.start()
    services = Services(str(nats_bus.nc.connected_url.geturl()) if nats_bus.nc.connected_url else "",
                        tmp_path)
    await services.start()
    try:
        await submit(nats_bus, execution_id, sequential_playbook(STEPS))

        def ten_steps_done() -> int:
            done = sum(1 for e in seen if e["event_type"] == "step.done")
            assert done >= 10
            return done

        done_at_kill = await assert_eventually(ten_steps_done, timeout_s=60, interval_s=0.01)
        await services.stop(signal.SIGKILL)
        assert done_at_kill < STEPS
        assert not any(e["event_type"] == "execution.completed" for e in seen)

        await services.start()
        final = await watch.wait(timeout_s=110)
    finally:
        await watch.stop()
        await services.stop(signal.SIGTERM)

    assert final["event_type"] == "execution.completed", final.get("error")
    steps = final["steps"]
    assert list(steps) == [f"s{n:02d}" for n in range(1, STEPS + 1)]
    for n in range(1, STEPS + 1):
        assert steps[f"s{n:02d}"] == {"status": "completed", "runs": 1, "result": {"i": n}}
    assert final["result"] == {"i": STEPS}

    stored = await stored_events(nats_bus.js, execution_id)
    done_per_run = Counter(e["step_run_id"] for e in stored if e["event_type"] == "step.done")
    assert sorted(done_per_run) == sorted(f"{execution_id}.s{n:02d}.1" for n in range(1, STEPS + 1))
    assert set(done_per_run.values()) == {1}
    started = Counter(e["step"] for e in stored if e["event_type"] == "step.started")
    assert set(started.values()) == {1}
    assert sum(1 for e in stored if e["event_type"] == "execution.completed") == 1
