"""Several `noetl-stream server` processes on one NATS share the durable consumers: both route
work, every execution finishes with its results, and no step run completes twice; after `kill -9`
of one, the other finishes everything, including the events the dead one had fetched.

Servers commit execution state by revision-checked KV update and retry on conflict
(docs/several-servers.md), so which server applies an event does not matter. The router
consumer's AckWait is shortened (NOETL_STREAM_ROUTER_ACK_WAIT_S) so the dead server's unacked
events come back within seconds.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from cli import CLI

from noetl_stream.bus.connection import Bus, connect
from noetl_stream.bus.nats_server import NatsServer
from noetl_stream.bus.watcher import ExecutionWatch
from noetl_stream.messages import ExecutionRequest
from noetl_stream.testing.events import stored_events
from noetl_stream.testing.nats import run_nats_server
from noetl_stream.testing.waiting import assert_eventually
from playbook_files import read_playbook

pytestmark = pytest.mark.e2e

EXECUTIONS = 20
ITEMS = 8
ROUTER_ACK_WAIT_S = "3"

# start -> (fan: a parallel loop, 3 in flight | side) -> merge (a join) -> finish
PLAYBOOK = read_playbook("e2e", "several_servers.yaml", items=ITEMS)

STEPS = ("start", "fan", "side", "merge", "finish")


def expected_final(n: int) -> int:
    return sum(k * n for k in range(ITEMS)) + n + 1


class Processes:
    """Server and worker processes of the CLI on one NATS, each logging to its own file."""

    def __init__(self, url: str, logs: Path) -> None:
        self.url = url
        self.logs = logs
        self.procs: dict[str, asyncio.subprocess.Process] = {}
        self.env = {**os.environ, "NOETL_STREAM_ROUTER_ACK_WAIT_S": ROUTER_ACK_WAIT_S}

    async def start(self, name: str, *args: str) -> None:
        log = open(self.logs / f"{name}.log", "wb")  # noqa: SIM115
        self.procs[name] = await asyncio.create_subprocess_exec(
            str(CLI), "-vv", *args, "--nats-url", self.url, stdin=asyncio.subprocess.DEVNULL,
            stdout=log, stderr=log, env=self.env)
        log.close()

    def log(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text(errors="replace")

    def commits(self, name: str) -> int:
        return len(re.findall(r"noetl_stream\.server: committed \d+ events", self.log(name)))

    async def ready(self) -> None:
        for name in self.procs:
            def running(name: str = name) -> None:
                assert f"{name.rstrip('0123456789')} running" in self.log(name), self.log(name)[-2000:]
            await assert_eventually(running, timeout_s=30, interval_s=0.05)

    async def kill(self, name: str) -> None:
        proc = self.procs.pop(name)
        proc.send_signal(signal.SIGKILL)
        await proc.wait()

    async def stop(self) -> None:
        for proc in self.procs.values():
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
                proc.send_signal(signal.SIGCONT)  # a stopped process acts on SIGTERM only then
        for proc in self.procs.values():
            await proc.wait()
        self.procs = {}


@pytest.fixture
async def nats(tmp_path: Path) -> AsyncIterator[NatsServer]:
    async with run_nats_server(tmp_path / "nats") as server:
        yield server


@pytest.fixture
async def stack(nats: NatsServer, tmp_path: Path) -> AsyncIterator[tuple[Processes, Bus]]:
    """Two servers and two workers, started at once (they provision concurrently)."""
    procs = Processes(nats.url, tmp_path)
    try:
        await procs.start("server1", "server")
        await procs.start("server2", "server")
        await procs.start("worker1", "worker", "--python-processes", "2")
        await procs.start("worker2", "worker", "--python-processes", "2")
        await procs.ready()
        bus = await connect(nats.url, name="several-servers-test")
        try:
            yield procs, bus
        finally:
            await bus.close()
    finally:
        await procs.stop()


async def start_all(bus: Bus, on_event: Any = None) -> dict[str, ExecutionWatch]:
    watches: dict[str, ExecutionWatch] = {}
    for n in range(1, EXECUTIONS + 1):
        execution_id = f"several{n:02d}"
        watches[execution_id] = ExecutionWatch(bus, execution_id, on_event)
        await watches[execution_id].start()
    for n in range(1, EXECUTIONS + 1):
        execution_id = f"several{n:02d}"
        request = ExecutionRequest(execution_id=execution_id, playbook=PLAYBOOK,
                                   playbook_file="several.yaml", payload={"n": n})
        await bus.js.publish(bus.topology.execute_request_subject(),
                             request.model_dump_json().encode(),
                             headers={"Nats-Msg-Id": f"req:{execution_id}"})
    return watches


async def check_results(bus: Bus, watches: dict[str, ExecutionWatch]) -> None:
    try:
        finals = {eid: await w.wait(timeout_s=120) for eid, w in watches.items()}
    finally:
        for w in watches.values():
            await w.stop()
    for n, (execution_id, final) in enumerate(sorted(finals.items()), start=1):
        assert final["event_type"] == "execution.completed", final
        assert final["result"] == {"final": expected_final(n)}, final
        assert {name: rec["runs"] for name, rec in final["steps"].items()} == \
            dict.fromkeys(STEPS, 1), final["steps"]

        stored = await stored_events(bus.js, execution_id)
        done = Counter(e["step_run_id"] for e in stored if e["event_type"] == "step.done")
        assert done == {f"{execution_id}.{s}.1": 1 for s in STEPS if s != "fan"}, done
        iterations = Counter(e["iteration"] for e in stored
                             if e["event_type"] == "loop.iteration.done")
        assert iterations == dict.fromkeys(range(ITEMS), 1), iterations
        assert sum(1 for e in stored if e["event_type"] == "loop.done") == 1
        assert sum(1 for e in stored if e["event_type"] == "execution.completed") == 1


async def freeze_holding_events(procs: Processes, bus: Bus, progress: list[str]) -> float:
    """Stop server1 (SIGSTOP) at a moment it holds router events it fetched and has not acked,
    so that killing it loses them; returns when it was stopped. Whether it does is seen from the
    partitions' consumers: an event delivered and still unacknowledged 1.2 s after the other
    server made progress is server1's (server2 acks what it applies within milliseconds)."""
    for _ in range(14):
        procs.procs["server1"].send_signal(signal.SIGSTOP)
        stopped_at = time.time()
        await more_progress(progress, 6)
        if await unacknowledged(bus):
            await asyncio.sleep(1.2)
            if await unacknowledged(bus):
                return stopped_at
        procs.procs["server1"].send_signal(signal.SIGCONT)
        await more_progress(progress, 2)
    raise AssertionError("server1 never held an unacknowledged event when stopped")


async def router_consumers(bus: Bus) -> list[Any]:
    return [await bus.js.consumer_info(c.stream, c.durable)
            for c in bus.topology.router_decl().consumers()]


async def unacknowledged(bus: Bus) -> bool:
    return any(i.ack_floor.consumer_seq < i.delivered.consumer_seq
               for i in await router_consumers(bus))


def pins(procs: Processes, name: str) -> list[tuple[float, str]]:
    """(when, durable) of each pin the server's log shows it took."""
    found = []
    for line in procs.log(name).splitlines():
        m = re.match(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3}) .*pull consumer (\S+): pinned here",
                     line)
        if m:
            when = time.mktime(time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")) + int(m.group(2)) / 1e3
            found.append((when, m.group(3)))
    return found


def conflicts(procs: Processes, name: str) -> int:
    return len(re.findall(r"noetl_stream\.server: revision conflict on ", procs.log(name)))


async def more_progress(progress: list[str], count: int) -> None:
    target = len(progress) + count

    def reached() -> None:
        assert len(progress) >= target

    await assert_eventually(reached, timeout_s=60, interval_s=0.01)


@pytest.mark.timeout(240)
async def test_two_servers_share_the_work_and_every_step_run_completes_once(
        stack: tuple[Processes, Bus]) -> None:
    procs, bus = stack
    watches = await start_all(bus)

    await check_results(bus, watches)

    commits = procs.commits("server1") + procs.commits("server2")
    assert procs.commits("server1") > 0
    assert procs.commits("server2") > 0
    # Each execution is one server's at a time (its partition's pin): next to no commit finds
    # its state moved by the other server.
    lost = conflicts(procs, "server1") + conflicts(procs, "server2")
    print(f"commits {commits}, revision conflicts {lost} ({100 * lost / commits:.2f}%)")
    assert lost < 0.01 * commits


@pytest.mark.timeout(240)
async def test_after_kill_9_of_one_server_the_other_finishes_every_execution(
        stack: tuple[Processes, Bus]) -> None:
    procs, bus = stack
    iterations_done: list[str] = []

    def on_event(event: dict[str, Any]) -> None:
        if event["event_type"] == "loop.iteration.done":
            iterations_done.append(event["execution_id"])

    watches = await start_all(bus, on_event)

    def a_quarter_done() -> None:
        assert len(iterations_done) >= EXECUTIONS * ITEMS // 4

    def server1_working() -> None:
        assert procs.commits("server1") > 0  # it holds partitions (they spread within seconds)

    await assert_eventually(a_quarter_done, timeout_s=60, interval_s=0.01)
    await assert_eventually(server1_working, timeout_s=30, interval_s=0.05)
    stopped_at = await freeze_holding_events(procs, bus, iterations_done)
    held = {durable for _, durable in pins(procs, "server1")}
    await procs.kill("server1")
    assert len(iterations_done) < EXECUTIONS * ITEMS

    await check_results(bus, watches)
    assert procs.commits("server2") > 0
    # Events the dead server held came back to the other one: more deliveries than events.
    delivered = sum(i.delivered.consumer_seq for i in await router_consumers(bus))
    assert delivered > EXECUTIONS * (len(STEPS) - 1 + ITEMS)
    # The other server took the dead one's partitions: their pins moved to it once it was silent.
    taken = {durable: when for when, durable in reversed(pins(procs, "server2"))
             if durable in held and when >= stopped_at}
    assert held and taken, (held, pins(procs, "server2"))
    print("pins taken over after", {d: round(t - stopped_at, 2) for d, t in sorted(taken.items())})
