"""`noetl-stream backup DIR` on one nats-server and `restore DIR` on a fresh one: an execution
waiting for approval there (with its one-hour timer pending) resumes on the new server and
completes; the restored consumers do not replay what the old server had already applied."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from cli import run_cli
from nats.js.errors import KeyNotFoundError

from noetl_stream.bus.connection import Bus, connect
from noetl_stream.bus.provision import provision
from noetl_stream.bus.signals import publish_signal
from noetl_stream.bus.watcher import ExecutionWatch
from noetl_stream.services import run_services, submit_and_watch
from noetl_stream.testing.nats import run_nats_server
from noetl_stream.testing.waiting import assert_eventually

pytestmark = pytest.mark.e2e

APPROVAL = Path(__file__).parents[2] / "playbooks" / "examples" / "approval.yaml"


async def listening(bus: Bus, execution_id: str) -> None:
    try:
        value = (await (await bus.js.key_value("noetl_executions")).get(execution_id)).value
    except KeyNotFoundError:
        raise AssertionError(f"no state of {execution_id} yet") from None
    state = json.loads(value or b"{}")
    assert any(r["step"] == "wait_for_approval" and r["status"] == "running"
               for r in state["runs"].values())


async def test_a_waiting_execution_resumes_on_a_restored_server(tmp_path: Path) -> None:
    folder = tmp_path / "backup"
    async with run_nats_server(tmp_path / "old") as old:
        bus = await connect(old.url)
        try:
            await provision(bus)
            async with run_services(bus, python_children=1):
                run = asyncio.create_task(submit_and_watch(
                    bus, playbook_text=APPROVAL.read_text(), playbook_file="approval.yaml",
                    payload={}, on_event=lambda e: None, execution_id="moved1", timeout_s=60))
                await assert_eventually(lambda: listening(bus, "moved1"), timeout_s=20)
                run.cancel()
        finally:
            await bus.close()
        saved = await run_cli("backup", str(folder), "--nats-url", old.url)
    assert saved.returncode == 0, saved.stderr
    rows = {line.split()[0]: line.split()[1:] for line in saved.stdout.splitlines()[1:]}
    assert int(rows["NOETL_EVENTS"][0]) > 0 and int(rows["KV_noetl_executions"][0]) == 1
    # The router reads its own stream; on the events stream only the admission service's durable.
    assert rows["NOETL_EVENTS"][1] == "1"
    # The router's stream is a copy of events: it is made again from the restored ones.
    assert rows["NOETL_ROUTER"] == ["0", "16"]

    async with run_nats_server(tmp_path / "new") as new:
        restored = await run_cli("restore", str(folder), "--nats-url", new.url)
        assert restored.returncode == 0, restored.stderr
        again = await run_cli("restore", str(folder), "--nats-url", new.url)
        assert again.returncode == 2 and "already" in again.stderr

        bus = await connect(new.url)
        try:
            report = await provision(bus)
            assert not report.drift and not report.created, report.lines()
            events: list[dict[str, Any]] = []
            watch = ExecutionWatch(bus, "moved1", events.append)
            await watch.start()
            try:
                async with run_services(bus, python_children=1):
                    await assert_eventually(lambda: listening(bus, "moved1"), timeout_s=20)
                    await publish_signal(bus, "moved1", "approve", {"user": "ada"})
                    final = await watch.wait(30)
            finally:
                await watch.stop()
        finally:
            await bus.close()
    assert final["status"] == "completed", final.get("error")
    assert final["result"] == {"shipped": 42, "approved_by": "ada"}
    # `start` ran once, on the old server: its outcome was not applied a second time here.
    assert sum(1 for e in events if e["event_type"] == "step.started" and e["step"] == "start") == 1
    assert sum(1 for e in events if e["event_type"] == "step.started" and e["step"] == "ship") == 1


async def test_restore_refuses_a_folder_that_is_no_backup(tmp_path: Path) -> None:
    out = await run_cli("restore", str(tmp_path))

    assert out.returncode == 2 and "not a backup" in out.stderr


async def _backup_of_twenty_events(tmp_path: Path) -> Path:
    folder = tmp_path / "backup"
    async with run_nats_server(tmp_path / "old") as old:
        bus = await connect(old.url)
        try:
            await provision(bus)
            for n in range(20):
                await bus.js.publish(f"noetl.events.cut{n}.execution.started", b'{"n": %d}' % n)
        finally:
            await bus.close()
        saved = await run_cli("backup", str(folder), "--nats-url", old.url)
    assert saved.returncode == 0, saved.stderr
    return folder


async def _streams_of(url: str) -> list[str]:
    bus = await connect(url)
    try:
        return [s.config.name for s in await bus.js.streams_info() if s.config.name]
    finally:
        await bus.close()


@pytest.mark.parametrize("cut", ["at_a_line_boundary", "mid_line"])
async def test_a_truncated_backup_is_refused_before_anything_is_restored(
        tmp_path: Path, cut: str) -> None:
    folder = await _backup_of_twenty_events(tmp_path)
    events = folder / "streams" / "NOETL_EVENTS.jsonl"
    lines = events.read_bytes().splitlines(keepends=True)
    assert len(lines) == 20
    kept = b"".join(lines[:10])
    events.write_bytes(kept if cut == "at_a_line_boundary" else kept + lines[10][:25])

    async with run_nats_server(tmp_path / "new") as new:
        restored = await run_cli("restore", str(folder), "--nats-url", new.url)
        streams = await _streams_of(new.url)

    assert restored.returncode == 2, restored.stdout + restored.stderr
    assert "NOETL_EVENTS.jsonl" in restored.stderr and "Traceback" not in restored.stderr
    assert ("line 11 is cut off" if cut == "mid_line" else "holds 10 messages") \
        in restored.stderr, restored.stderr
    assert streams == []  # nothing was written, not even the streams before the damaged one


async def test_a_backup_file_changed_in_place_is_refused(tmp_path: Path) -> None:
    folder = await _backup_of_twenty_events(tmp_path)
    events = folder / "streams" / "NOETL_EVENTS.jsonl"
    events.write_text(events.read_text().replace(".cut3.", ".cut4."))

    async with run_nats_server(tmp_path / "new") as new:
        restored = await run_cli("restore", str(folder), "--nats-url", new.url)
        streams = await _streams_of(new.url)

    assert restored.returncode == 2 and "SHA-256" in restored.stderr, restored.stderr
    assert "NOETL_EVENTS.jsonl" in restored.stderr and streams == []
