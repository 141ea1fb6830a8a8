"""The watchdog through the real server and worker: no execution stays `running` past a step's
deadline. A python step that outlives `spec.timeout` fails by timeout; a command that a worker
takes and never answers fails by the router's durable timer (`step.timeout`); a parent step that
times out cancels its child; a redelivered command is announced as `task.redelivered`."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from noetl_stream import jsonutil
from noetl_stream.bus.connection import Bus
from noetl_stream.bus.provision import consumer_config
from noetl_stream.dsl.composition import load_with_children
from noetl_stream.server.execution_ids import new_execution_id
from noetl_stream.services import run_services, submit_and_watch
from noetl_stream.state.catalog import register_files
from noetl_stream.testing.events import child_states, stored_events
from noetl_stream.testing.waiting import assert_eventually
from playbook_files import read_playbook

pytestmark = pytest.mark.integration

SLOW = read_playbook("integration", "watchdog_slow.yaml")

CHILD = SLOW.replace("name: slow", "name: child").replace("    spec: {timeout: 1}\n", "")

PARENT = read_playbook("integration", "watchdog_parent.yaml")


async def test_a_python_step_past_its_timeout_fails_the_execution_with_the_reason(
        bus: Bus, services: None) -> None:
    final = await submit_and_watch(bus, playbook_text=SLOW, playbook_file="slow.yaml", payload={},
                                   on_event=lambda e: None, execution_id="slow1", timeout_s=20)
    assert final["status"] == "failed"
    assert final["steps"]["start"]["error"]["kind"] == "timeout"
    assert "timeout of 1s" in final["error"]["message"]


async def test_a_command_no_worker_answers_fails_by_the_watchdog(bus: Bus) -> None:
    decl = bus.topology.pool_consumer("default")
    async with run_services(bus, worker=False):
        events: list[dict[str, Any]] = []
        run = asyncio.create_task(submit_and_watch(
            bus, playbook_text=SLOW, playbook_file="slow.yaml", payload={},
            on_event=events.append, execution_id="silent1", timeout_s=20))
        # A worker that takes the command and never answers nor acknowledges it.
        silent = await bus.js.pull_subscribe_bind(decl.durable, stream=decl.stream)
        (taken,) = await silent.fetch(1, timeout=10)
        assert jsonutil.loads(taken.data)["step"] == "start"
        final = await run
        await silent.unsubscribe()

    assert final["status"] == "failed"
    assert final["steps"]["start"]["status"] == "failed"
    assert final["steps"]["start"]["error"]["kind"] == "timeout"
    assert "no outcome within 1s" in final["error"]["message"]
    (timeout,) = [e for e in events if e["event_type"] == "step.timeout"]
    assert timeout["step_run_id"] == "silent1.start.1"


async def test_a_parent_step_that_times_out_cancels_its_child(
        bus: Bus, services: None, tmp_path: Path) -> None:
    (tmp_path / "child.yaml").write_text(CHILD)
    (tmp_path / "parent.yaml").write_text(PARENT)
    composed = load_with_children(tmp_path / "parent.yaml")
    await register_files(bus.js, composed.files)
    parent_id = new_execution_id()
    final = await submit_and_watch(bus, playbook_text=composed.files[0].text,
                                   playbook_file="parent.yaml", payload={},
                                   on_event=lambda e: None, execution_id=parent_id, timeout_s=20)
    assert final["status"] == "failed"
    assert final["steps"]["start"]["error"]["kind"] == "timeout"

    async def child_cancelled() -> None:
        states = await child_states(bus.js, parent_id)
        assert len(states) == 1, states
        state = states[0]
        assert state["status"] == "cancelled"

    await assert_eventually(child_cancelled)


async def test_a_redelivered_command_is_announced_as_task_redelivered(bus: Bus) -> None:
    decl = bus.topology.pool_consumer("default")
    # A short AckWait on this test's private server, so redelivery comes within a second.
    await bus.js.add_consumer(decl.stream, consumer_config(dataclasses.replace(decl, ack_wait_s=1.0)))
    quick = SLOW.replace("time.sleep(30)", "pass").replace('"never"', "42")
    async with run_services(bus, worker=False):
        run = asyncio.create_task(submit_and_watch(
            bus, playbook_text=quick, playbook_file="quick.yaml", payload={},
            on_event=lambda e: None, execution_id="again1", timeout_s=20))
        lost = await bus.js.pull_subscribe_bind(decl.durable, stream=decl.stream)
        await lost.fetch(1, timeout=10)  # taken by a worker that dies
        await lost.unsubscribe()
        async with run_services(bus, server=False, python_children=1):
            final = await run
    assert final["status"] == "completed"
    stored = await stored_events(bus.js, "again1")
    (redelivered,) = [e for e in stored if e["event_type"] == "task.redelivered"]
    assert redelivered["delivery"] == 2
    assert redelivered["step_run_id"] == "again1.start.1"
