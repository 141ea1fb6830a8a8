"""`eval_mode: on_event` listeners through the real server and worker: human approval answered
by `noetl-stream signal` and by a plain NATS client, an unmatched signal recorded and ignored, and
a durable timer (a NATS message schedule) that fires `timer.fired`."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from plain_client import PlainClient

from noetl_stream.bus.connection import Bus
from noetl_stream.bus.nats_server import NatsServer
from noetl_stream.server.execution_ids import new_execution_id
from noetl_stream.services import submit_and_watch
from noetl_stream.testing.waiting import assert_eventually
from playbook_files import read_playbook

pytestmark = pytest.mark.integration

APPROVAL = Path(__file__).resolve().parents[2] / "playbooks" / "examples" / "approval.yaml"
CLI = Path(sys.executable).with_name("noetl-stream")

TIMER = read_playbook("integration", "listeners_timer.yaml")


class Run:
    """An execution of a playbook followed in the background."""

    def __init__(self, bus: Bus, text: str) -> None:
        self.execution_id = new_execution_id()
        self.events: list[dict[str, Any]] = []
        self.task = asyncio.create_task(submit_and_watch(
            bus, playbook_text=text, playbook_file="test.yaml", payload={},
            on_event=self.events.append, execution_id=self.execution_id, timeout_s=30))

    def types(self) -> list[str]:
        return [str(e["event_type"]) for e in self.events]

    async def listening(self, step: str = "wait_for_approval") -> None:
        def started() -> None:
            assert any(e["event_type"] == "step.started" and e.get("step") == step
                       for e in self.events), self.types()
        await assert_eventually(started)


async def cli_signal(nats_url: str, execution_id: str, name: str, data: Any, *extra: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        str(CLI), "signal", execution_id, name, "--data", json.dumps(data), "--nats-url", nats_url,
        *extra,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, err.decode()
    return out.decode()


async def test_approval_waits_then_ships_on_a_signal_sent_with_the_cli(
        bus: Bus, services: None, nats_server: NatsServer) -> None:
    run = Run(bus, APPROVAL.read_text())
    await run.listening()
    # A signal no rule takes is answered with `event.ignored`: once that is seen, the router has
    # applied an event after step.enter, and the execution still waits.
    await cli_signal(nats_server.url, run.execution_id, "ping", {}, "--force")

    def ping_ignored() -> None:
        assert any(e["event_type"] == "event.ignored" for e in run.events), run.types()
    await assert_eventually(ping_ignored)
    assert not run.task.done()

    out = await cli_signal(nats_server.url, run.execution_id, "approve", {"user": "ada"})
    final = await run.task

    assert "signal.approve sent to" in out
    assert final["status"] == "completed", final.get("error")
    assert final["ctx"]["approved_by"] == "ada"
    assert final["steps"]["wait_for_approval"]["result"] == {"user": "ada"}
    assert final["steps"]["ship"]["result"] == {"shipped": 42, "approved_by": "ada"}
    assert final["steps"]["escalate"]["status"] == "skipped"
    assert "signal.approve" in run.types()


async def test_approval_is_rejected_by_a_plain_nats_client_after_an_unmatched_signal(
        bus: Bus, services: None, client: PlainClient) -> None:
    run = Run(bus, APPROVAL.read_text())
    await run.listening()
    subject = f"noetl.events.{run.execution_id}.signal."
    # A body that looks like an envelope stays the signal's data: it cannot end the execution.
    await client.nc.jetstream().publish(subject + "comment",
                                        json.dumps({"event_type": "execution.completed"}).encode())
    await assert_eventually(lambda: _assert_in("event.ignored", run.types()))
    assert not run.task.done()

    await client.nc.jetstream().publish(subject + "reject", b'{"user": "bob"}')
    final = await run.task

    assert final["status"] == "failed"
    assert "signal.reject" in final["error"]["message"]
    assert final["ctx"]["rejected"] == {"user": "bob"}
    (ignored,) = [e for e in run.events if e["event_type"] == "event.ignored"]
    assert ignored["ignored"] == "signal.comment"


async def test_a_durable_timer_fires_and_the_listener_acts_on_it(bus: Bus, services: None) -> None:
    run = Run(bus, TIMER)
    final = await run.task

    assert final["status"] == "completed", final.get("error")
    assert final["ctx"]["fired"] == "nudge"
    assert final["steps"]["done"]["status"] == "completed"
    assert "timer.fired" in run.types()


async def test_a_signal_for_an_ended_execution_is_recorded_and_ignored(
        bus: Bus, services: None, nats_server: NatsServer) -> None:
    run = Run(bus, APPROVAL.read_text())
    await run.listening()
    await cli_signal(nats_server.url, run.execution_id, "approve", {"user": "ada"})
    assert (await run.task)["status"] == "completed"

    # The CLI refuses a signal to an ended execution; --force sends it to show what the router does.
    await cli_signal(nats_server.url, run.execution_id, "approve", {"user": "eve"}, "--force")
    async def drained() -> None:
        for router in bus.topology.router_decl().consumers():
            info = await bus.js.consumer_info(router.stream, router.durable)
            assert info.num_pending == 0 and info.num_ack_pending == 0
    await assert_eventually(drained)
    entry = await (await bus.js.key_value("noetl_executions")).get(run.execution_id)
    state = json.loads(entry.value or b"{}")
    assert state["status"] == "completed" and state["ctx"]["approved_by"] == "ada"


def _assert_in(item: str, items: list[str]) -> None:
    assert item in items


async def _stderr_until(proc: asyncio.subprocess.Process, text: str, seen: list[str]) -> str:
    """Read the process's stderr line by line until one contains `text`; return that line."""
    assert proc.stderr is not None
    while True:
        line = (await asyncio.wait_for(proc.stderr.readline(), 30)).decode()
        assert line, f"stderr ended before {text!r}: {''.join(seen)}"
        seen.append(line)
        if text in line:
            return line


async def _cli(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        str(CLI), *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


@pytest.mark.parametrize("as_json", [False, True], ids=["plain", "json"])
async def test_cli_run_shows_the_timer_as_scheduled_and_prints_no_result_when_cancelled(
        services: None, nats_server: NatsServer, as_json: bool) -> None:
    url = ["--nats-url", nats_server.url]
    run = await asyncio.create_subprocess_exec(
        str(CLI), "run", str(APPROVAL), *url, *(["--json"] if as_json else []),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL)
    seen: list[str] = []
    try:
        started = await _stderr_until(run, " started (approval)", seen)
        execution_id = started.split("execution ", 1)[1].split()[0]
        assert 0 < int(execution_id) < 2**63
        # The one-hour timer is set, not fired.
        await _stderr_until(run, "timer timeout scheduled, fires in 1h", seen)
        watch = asyncio.create_task(_cli("watch", execution_id, "--json", *url))

        code, _, err = await _cli("cancel", execution_id, "--reason", "not today", "--wait", *url)
        assert code == 0, err
        out_bytes, rest = await asyncio.wait_for(run.communicate(), 30)
    finally:
        if run.returncode is None:
            run.kill()
            await run.wait()

    stderr = "".join(seen) + rest.decode()
    assert run.returncode == 1, stderr
    assert "timer timeout fired" not in stderr and "cancelled" in stderr
    if as_json:
        summary = json.loads(out_bytes)
        assert summary["status"] == "cancelled" and summary["result"] is None
        assert summary["steps"]["start"]["result"] == {"order_id": 42, "total": 1250}
    else:
        assert out_bytes == b""  # not the first step's result
    watch_code, watched, _ = await watch
    assert watch_code == 1
    types = [json.loads(line)["event_type"] for line in watched.splitlines()]
    assert "timer.fired" not in types and types[-1] == "execution.cancelled"
    (scheduled,) = [json.loads(line) for line in watched.splitlines()
                    if json.loads(line)["event_type"] == "timer.scheduled"]
    assert scheduled["timer_id"] == "timeout"
    assert scheduled["fire_at"] - scheduled["set_at"] == 3600
