"""The router cancels the child executions a parent step waits on, with no worker involved: the
parent's `kind: playbook` step runs in pool `parents`, whose worker stops once the child has
started (a worker that died), while the child's sleeping python runs in pool `default`.
Cancelling the parent, or the watchdog timing out its step, still ends the child `cancelled`;
a fire-and-forget (`async: true`) child is left running."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from noetl_stream.bus.connection import Bus
from noetl_stream.bus.provision import provision
from noetl_stream.dsl.composition import load_with_children
from noetl_stream.server.cancel import request_cancel
from noetl_stream.server.execution_ids import new_execution_id
from noetl_stream.services import run_services, submit_and_watch
from noetl_stream.state.catalog import register_files
from noetl_stream.testing.events import child_states, stored_events
from noetl_stream.testing.waiting import assert_eventually
from playbook_files import read_playbook

pytestmark = pytest.mark.integration

CHILD = read_playbook("integration", "cancel_child.yaml")


def parent_text(*, timeout_s: int | None = None, detached: bool = False) -> str:
    spec = f"spec: {{timeout: {timeout_s}}}" if timeout_s else ""
    return read_playbook("integration", "child_cancel_parent.yaml", spec=spec,
                         detached="async: true" if detached else "")


@pytest.fixture
async def server_and_default_worker(bus: Bus) -> AsyncIterator[None]:
    await provision(bus, ("default", "parents"))
    async with run_services(bus, python_children=1):
        yield


class Family:
    """A parent execution started on this test's bus, and the one child it starts."""

    def __init__(self, bus: Bus, parent_id: str) -> None:
        self.bus = bus
        self.parent_id = parent_id

    async def child_state(self) -> dict[str, Any]:
        states = await child_states(self.bus.js, self.parent_id)
        assert len(states) == 1, states
        state = states[0]
        return state

    async def child_sleeping(self) -> None:
        """The child runs its python step, and the parent's router has recorded it."""
        state = await self.child_state()
        assert state["status"] == "running" and state["runs"]
        stored = await stored_events(self.bus.js, state["execution_id"])
        assert "task.started" in [e["event_type"] for e in stored]
        parent = await stored_events(self.bus.js, self.parent_id)
        assert "child.started" in [e["event_type"] for e in parent]


async def start_family(bus: Bus, tmp_path: Path, parent: str,
                       ) -> tuple[Family, asyncio.Task[dict[str, Any]]]:
    (tmp_path / "child.yaml").write_text(CHILD)
    (tmp_path / "parent.yaml").write_text(parent)
    composed = load_with_children(tmp_path / "parent.yaml")
    await register_files(bus.js, composed.files)
    parent_id = new_execution_id()
    run = asyncio.create_task(submit_and_watch(
        bus, playbook_text=composed.files[0].text, playbook_file="parent.yaml", payload={},
        on_event=lambda e: None, execution_id=parent_id, timeout_s=30))
    return Family(bus, parent_id), run


async def test_cancelling_a_parent_whose_worker_died_cancels_the_child(
        bus: Bus, server_and_default_worker: None, tmp_path: Path) -> None:
    family, run = await start_family(bus, tmp_path, parent_text())
    async with run_services(bus, server=False, pool="parents", python_children=1):
        await assert_eventually(family.child_sleeping)
    # The parents' worker is gone: its playbook task can no longer ask for anything.
    await request_cancel(bus, family.parent_id, reason="enough", requested_by="test")
    final = await asyncio.wait_for(run, 20)
    assert final["status"] == "cancelled"

    async def child_cancelled() -> None:
        state = await family.child_state()
        assert state["status"] == "cancelled"
        assert state["error"]["requested_by"] == f"execution {family.parent_id}"
        assert state["error"]["reason"] == f"its parent {family.parent_id} was cancelled: enough"

    await assert_eventually(child_cancelled)


async def test_a_parent_step_timing_out_after_its_worker_died_cancels_the_child(
        bus: Bus, server_and_default_worker: None, tmp_path: Path) -> None:
    # The task's own 3 s wait is what a live worker would act on; the worker stops long before.
    family, run = await start_family(bus, tmp_path, parent_text(timeout_s=3))
    async with run_services(bus, server=False, pool="parents", python_children=1):
        await assert_eventually(family.child_sleeping)
    final = await asyncio.wait_for(run, 20)
    assert final["status"] == "failed"
    assert final["steps"]["start"]["error"]["kind"] == "timeout"
    assert final["steps"]["start"]["error"]["source"] == "watchdog"

    async def child_cancelled() -> None:
        state = await family.child_state()
        assert state["status"] == "cancelled"
        assert state["error"]["reason"].startswith("its parent's step start timed out")

    await assert_eventually(child_cancelled)


async def router_idle(bus: Bus) -> None:
    """The server has applied (and acked) every event, then every request, stored so far."""
    for decl in (*bus.topology.router_decl().consumers(),
                 bus.topology.consumer("noetl-server-requests")):
        info = await bus.js.consumer_info(decl.stream, decl.durable)
        assert (info.num_pending, info.num_ack_pending) == (0, 0)


async def test_a_fire_and_forget_child_is_left_running_when_its_parent_step_ends(
        bus: Bus, server_and_default_worker: None, tmp_path: Path) -> None:
    family, run = await start_family(bus, tmp_path, parent_text(detached=True))
    async with run_services(bus, server=False, pool="parents", python_children=1):
        final = await asyncio.wait_for(run, 20)  # the parent does not wait for its child
        await assert_eventually(family.child_sleeping)
    assert final["status"] == "completed"
    (started,) = [e for e in await stored_events(bus.js, family.parent_id)
                  if e["event_type"] == "child.started"]
    assert started["detached"] is True
    # Once the router has acked `child.started`, a cancel it asked for is a stored request, and
    # once that is acked, an event in the child's log.
    await assert_eventually(lambda: router_idle(bus))
    child = await family.child_state()
    assert child["status"] == "running"
    stored = await stored_events(bus.js, child["execution_id"])
    assert "execution.cancel.requested" not in [e["event_type"] for e in stored]
