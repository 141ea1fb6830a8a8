"""`kill -9` and restart of nats-server while executions run: every execution completes with its
results, and its committed state is what its events say (`noetl-stream verify`), each event
applied once.

NOETL_ROUTER is a work queue sourced from NOETL_EVENTS; after the restart nats-server copies
events into it again that the server already applied. The server must tell those copies apart
(server/source_copies.py): applied again, they inflate the state's count of applied events,
which verify reports.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from processes import Processes

from noetl_stream import jsonutil
from noetl_stream.bus.connection import Bus, connect
from noetl_stream.bus.nats_server import NatsServer, start_nats_server
from noetl_stream.bus.provision import provision
from noetl_stream.server.replay import applied_events
from noetl_stream.server.retention import EXECUTIONS_BUCKET
from noetl_stream.server.submission import submit
from noetl_stream.server.verify import committed_state, read_log, verify
from noetl_stream.state.results import ResultStore
from noetl_stream.state.step_results import StepResults

pytestmark = pytest.mark.e2e

ITEMS = 10
EXECUTIONS = 6
RESTARTS = 3  # at most, until one makes nats-server copy events again
PLAYBOOK = f"""apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: restart-fanout}}
workflow:
  - step: start
    loop:
      in: "{{{{ range({ITEMS}) | list }}}}"
      iterator: k
      spec: {{mode: parallel, max_in_flight: 3}}
    tool:
      kind: python
      input: {{k: "{{{{ k }}}}"}}
      code: |
        import time
        time.sleep(0.3)
        result = {{"v": k * k}}
    next: total
  - step: total
    tool:
      kind: python
      input: {{items: "{{{{ start }}}}"}}
      code: |
        result = {{"sum": sum(i["v"] for i in items)}}
    next: last
  - step: last
    tool: {{kind: noop}}
"""
EXPECTED_SUM = sum(k * k for k in range(ITEMS))


class Nats:
    """One nats-server on a fixed store and port, killed and started again by the test."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.server: NatsServer | None = None
        self.port: int | None = None

    async def start(self) -> str:
        self.server = await start_nats_server(self.folder, port=self.port, record=False)
        self.port = self.server.port
        return self.server.url

    def kill(self) -> None:
        assert self.server is not None and self.server.process is not None
        self.server.process.send_signal(signal.SIGKILL)
        self.server.process.wait()

    async def stop(self) -> None:
        if self.server is not None:
            with contextlib.suppress(Exception):
                await self.server.stop()


@pytest.fixture
async def nats(tmp_path: Path) -> AsyncIterator[Nats]:
    nats = Nats(tmp_path / "nats")
    try:
        yield nats
    finally:
        await nats.stop()


async def states(bus: Bus, ids: list[str]) -> dict[str, dict[str, Any]]:
    """The committed states (as stored) of those of `ids` that have one."""
    kv = await bus.js.key_value(EXECUTIONS_BUCKET)
    found = {}
    for execution_id in ids:
        with contextlib.suppress(Exception):
            found[execution_id] = jsonutil.loads_object((await kv.get(execution_id)).value or b"{}")
    return found


async def statuses(bus: Bus, ids: list[str]) -> dict[str, str]:
    return {e: str(s.get("status")) for e, s in (await states(bus, ids)).items()}


async def progressed(bus: Bus, ids: list[str], applied: int) -> dict[str, str]:
    """Wait until every execution has applied `applied` events; their statuses then."""
    while True:
        found = await states(bus, ids)
        if len(found) == len(ids) and all(int(s.get("applied", 0)) >= applied
                                          for s in found.values()):
            return {e: str(s.get("status")) for e, s in found.items()}
        await asyncio.sleep(0.05)


async def router_events(bus: Bus, execution_id: str) -> int:
    """How many events of the execution's log NOETL_ROUTER copies (each applied once)."""
    return len(applied_events(await read_log(bus, execution_id), bus.topology))


async def router_copies(bus: Bus) -> int:
    """How many copies NOETL_ROUTER has made (its last sequence: it started empty)."""
    return int((await bus.js.stream_info(bus.topology.router_decl().stream)).state.last_seq)


async def router_drained(bus: Bus) -> None:
    """Wait (a moment at most) for NOETL_ROUTER to hold no copy: nats-server resumes sourcing
    after the last copy it holds, and copies events again only when it holds none.
    """
    for _ in range(100):
        info = await bus.js.stream_info(bus.topology.router_decl().stream)
        if info.state.messages == 0:
            return
        await asyncio.sleep(0.01)


async def copied_again(bus: Bus, ids: list[str]) -> bool:
    """Whether NOETL_ROUTER made more copies than there are events to copy. The copies are
    counted first: an event stored after that adds to the events only.
    """
    for _ in range(50):  # JetStream may take a moment after the restart
        try:
            copies = await router_copies(bus)
            return copies > sum([await router_events(bus, e) for e in ids])
        except Exception:
            await asyncio.sleep(0.2)
    raise AssertionError("JetStream did not answer within 10 s of the restart")


async def test_after_a_nats_server_restart_every_execution_verifies(nats: Nats,
                                                                      tmp_path: Path) -> None:
    url = await nats.start()
    bus = await connect(url, name="nats-restart-test")
    await provision(bus)
    procs = Processes(url, tmp_path)
    try:
        await procs.start("server", "server")
        await procs.start("worker", "worker", "--python-processes", "2", "--concurrency", "8")
        ids = [await submit(bus, playbook_text=PLAYBOOK, playbook_file="fanout.yaml", payload={},
                            execution_id=f"natsrestart{n:02d}") for n in range(EXECUTIONS)]
        # Down while the loops are half done: events applied before the restart and after it.
        running = await asyncio.wait_for(progressed(bus, ids, 3), 120)
        for _ in range(RESTARTS):
            await router_drained(bus)
            nats.kill()
            await asyncio.sleep(1.0)
            await nats.start()
            await asyncio.sleep(1.0)
            if await copied_again(bus, ids):
                break

        async def ended() -> dict[str, str]:
            while True:
                found = await statuses(bus, ids)
                if len(found) == EXECUTIONS and "running" not in found.values():
                    return found
                await asyncio.sleep(0.3)

        final = await asyncio.wait_for(ended(), 240)
        assert set(running.values()) == {"running"}, f"the restart came too late: {running}"
        assert set(final.values()) == {"completed"}, final

        # nats-server did copy events again: NOETL_ROUTER made more copies than there are events
        # to apply (otherwise this test would not show anything).
        events = {e: await router_events(bus, e) for e in ids}
        copies = await router_copies(bus)
        assert copies > sum(events.values()), (copies, events)

        step_results = StepResults(bus.js, ResultStore(bus.js))
        for execution_id in ids:
            verdict = await verify(bus, execution_id)
            assert verdict.outcome == "equal", verdict
            state = await committed_state(bus, execution_id, step_results)
            assert state is not None
            assert state.applied == events[execution_id], (execution_id, state.applied)
            assert state.steps["total"].result == {"sum": EXPECTED_SUM}, execution_id
        assert "Traceback" not in procs.log_of("server")
    finally:
        await procs.stop_all()
        await bus.close()
