"""Cancellation through the real server and worker: a running execution with a sleeping python
step and a loop with iterations in flight ends `cancelled` quickly and its python processes are
gone; cancelling a parent cancels the child it waits for; a cancel of an unknown or finished
execution is answered, not applied."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from noetl_stream import jsonutil
from noetl_stream.bus.connection import Bus
from noetl_stream.dsl.composition import load_with_children
from noetl_stream.messages import RequestReply
from noetl_stream.server.cancel import request_cancel
from noetl_stream.server.execution_ids import new_execution_id
from noetl_stream.services import submit_and_watch
from noetl_stream.state.catalog import register_files
from noetl_stream.testing.events import child_states
from noetl_stream.testing.waiting import assert_eventually
from playbook_files import read_playbook

pytestmark = pytest.mark.integration

SLEEPERS = read_playbook("integration", "cancel_sleepers.yaml")

CHILD = read_playbook("integration", "cancel_child.yaml")

PARENT = read_playbook("integration", "cancel_parent.yaml")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def ask(bus: Bus, execution_id: str, reason: str = "test") -> RequestReply:
    """Send a cancel request and return the server's answer."""
    inbox = bus.nc.new_inbox()
    sub = await bus.nc.subscribe(inbox, max_msgs=1)
    try:
        await request_cancel(bus, execution_id, reason=reason, requested_by="test", reply_to=inbox)
        msg = await sub.next_msg(timeout=10)
    finally:
        await sub.unsubscribe()
    return RequestReply.model_validate_json(msg.data)


async def test_cancel_stops_a_running_step_and_loop_iterations_and_kills_python(
        bus: Bus, services: None, shared_folder: Path) -> None:
    folder = shared_folder  # the steps, as slot uids, write their pids here
    execution_id = new_execution_id()
    events: list[dict[str, Any]] = []
    run = asyncio.create_task(submit_and_watch(
        bus, playbook_text=SLEEPERS, playbook_file="sleepers.yaml",
        payload={"pids": str(folder)}, on_event=events.append, execution_id=execution_id,
        timeout_s=30))

    def two_sleeping() -> list[int]:  # the services run two python processes at most
        pids = [int(p.name) for p in folder.iterdir()]
        assert len(pids) == 2
        return pids

    pids = await assert_eventually(two_sleeping)
    reply = await ask(bus, execution_id, "enough")
    assert reply.accepted and reply.errors == []

    final = await asyncio.wait_for(run, 10)
    assert final["event_type"] == "execution.cancelled"
    assert final["status"] == "cancelled"
    assert final["error"]["reason"] == "enough"
    assert final["steps"]["slow"]["status"] == "cancelled"
    assert final["steps"]["fan"]["status"] == "cancelled"
    cancelled = {e["step"]: e for e in events if e["event_type"] == "step.cancelled"}
    assert cancelled["fan"]["iterations"] == [0, 1, 2]

    def gone() -> None:
        assert [pid for pid in pids if alive(pid)] == []

    await assert_eventually(gone)
    # The worker acked the withdrawn commands without an outcome of its own.
    assert not [e for e in events if e["event_type"] in ("step.failed", "loop.iteration.failed")]


async def test_cancelling_a_parent_cancels_the_child_it_waits_for(
        bus: Bus, services: None, tmp_path: Path) -> None:
    (tmp_path / "child.yaml").write_text(CHILD)
    (tmp_path / "parent.yaml").write_text(PARENT)
    composed = load_with_children(tmp_path / "parent.yaml")
    await register_files(bus.js, composed.files)
    parent_id = new_execution_id()
    run = asyncio.create_task(submit_and_watch(
        bus, playbook_text=composed.files[0].text, playbook_file="parent.yaml", payload={},
        on_event=lambda e: None, execution_id=parent_id, timeout_s=30))

    async def child_state() -> dict[str, Any]:
        states = await child_states(bus.js, parent_id)
        assert len(states) == 1, states
        state = states[0]
        return state

    async def child_running() -> dict[str, Any]:
        state = await child_state()
        assert state["status"] == "running" and state["runs"]
        return state

    await assert_eventually(child_running)
    assert (await ask(bus, parent_id)).accepted
    final = await asyncio.wait_for(run, 10)
    assert final["status"] == "cancelled"

    async def child_cancelled() -> None:
        state = await child_state()
        assert state["status"] == "cancelled"
        assert parent_id in (state["error"] or {}).get("requested_by", "")

    await assert_eventually(child_cancelled)


async def test_cancel_of_an_unknown_or_finished_execution_is_refused(
        bus: Bus, services: None) -> None:
    reply = await ask(bus, "nosuchexecution")
    assert not reply.accepted and "no execution nosuchexecution" in reply.errors[0]

    done = await submit_and_watch(bus, playbook_text=CHILD.replace("time.sleep(30)", "pass"),
                                  playbook_file="quick.yaml", payload={},
                                  on_event=lambda e: None, execution_id="quick1", timeout_s=30)
    assert done["status"] == "completed"
    reply = await ask(bus, "quick1")
    assert not reply.accepted and "already completed" in reply.errors[0]
    kv = await bus.js.key_value("noetl_executions")
    state = jsonutil.loads((await kv.get("quick1")).value or b"{}")
    assert state["status"] == "completed"
