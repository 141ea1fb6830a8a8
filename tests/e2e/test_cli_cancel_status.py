"""`noetl-stream status` and `noetl-stream cancel` as a user runs them, against a server and
worker on the test's nats-server: status says what a running execution waits for (a command
with its deadline, a listener's rules), cancel --wait stops it, and a second cancel is refused."""

from __future__ import annotations

import asyncio
import json

import pytest
from cli import run_cli

from noetl_stream.bus.connection import Bus
from noetl_stream.bus.nats_server import NatsServer
from noetl_stream.services import run_services, submit_and_watch
from noetl_stream.testing.waiting import assert_eventually
from playbook_files import read_playbook

pytestmark = pytest.mark.e2e

WAITING = read_playbook("e2e", "cli_cancel_status_waiting.yaml")


async def test_status_explains_the_wait_and_cancel_stops_the_execution(
        bus: Bus, nats_server: NatsServer) -> None:
    url = ["--nats-url", nats_server.url]
    async with run_services(bus, python_children=1):
        run = asyncio.create_task(submit_and_watch(
            bus, playbook_text=WAITING, playbook_file="waiting.yaml", payload={},
            on_event=lambda e: None, execution_id="cli1", timeout_s=60))

        async def both_waiting() -> dict[str, object]:
            result = await run_cli("status", "cli1", "--json", *url)
            assert result.returncode == 0, result.stderr
            report = json.loads(result.stdout)
            assert {r["step"] for r in report["running"]} == {"slow", "approval"}
            return dict(report)

        report = await assert_eventually(both_waiting, timeout_s=20)
        assert report["status"] == "running"
        slow = next(r for r in report["running"] if r["step"] == "slow")
        assert slow["deadline"] > slow["since"]
        approval = next(r for r in report["running"] if r["step"] == "approval")
        assert approval["listen"] == ["{{ event.name == 'signal.approve' }}"]

        human = await run_cli("status", "cli1", *url)
        assert "execution cli1: running" in human.stdout
        assert 'step slow (run 1): waits for the outcome of its command in pool "default"' in human.stdout
        assert "deadline" in human.stdout

        cancelled = await run_cli("cancel", "cli1", "--reason", "no longer needed", "--wait",
                                  *url)
        assert cancelled.returncode == 0, cancelled.stderr
        assert "cli1 cancelled" in cancelled.stdout
        final = await asyncio.wait_for(run, 10)
        assert final["status"] == "cancelled"

        after = await run_cli("status", "cli1", *url)
        assert "execution cli1: cancelled" in after.stdout
        assert "no longer needed" in after.stdout
        again = await run_cli("cancel", "cli1", *url)
        assert again.returncode == 2
        assert "already cancelled" in again.stderr
        unknown = await run_cli("status", "nosuch", *url)
        assert unknown.returncode == 2
