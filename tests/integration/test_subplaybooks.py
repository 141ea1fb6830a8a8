"""Sub-playbooks (`kind: playbook`) through the real server and worker: waiting for the child,
child failure, async start, and exactly one child per task attempt under redelivery."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from noetl_stream import ids, jsonutil, refs
from noetl_stream.bus.connection import Bus
from noetl_stream.bus.event_feed import event_follower
from noetl_stream.bus.provision import consumer_config
from noetl_stream.bus.watcher import ExecutionWatch
from noetl_stream.dsl.composition import PlaybookFile, load_with_children
from noetl_stream.dsl.parser import parse_playbook
from noetl_stream.messages import Command
from noetl_stream.services import run_services, submit_and_watch
from noetl_stream.state.catalog import register_files, register_path
from noetl_stream.testing.events import stored_events, stored_messages
from noetl_stream.testing.waiting import assert_eventually
from noetl_stream.tools.base import TaskCall, ToolServices
from noetl_stream.tools.playbook import PlaybookTool
from noetl_stream.tools.registry import ToolRegistry
from noetl_stream.worker.pipeline import Pipeline
from playbook_files import read_playbook

pytestmark = pytest.mark.integration

CHILD = read_playbook("integration", "subplaybooks_child.yaml")

PARENT = read_playbook("integration", "subplaybooks_parent.yaml")

ASYNC_PARENT = read_playbook("integration", "subplaybooks_async_parent.yaml")

LOOP_PARENT = read_playbook("integration", "subplaybooks_loop_parent.yaml")


async def _register(bus: Bus, folder: Path, parent: str) -> str:
    """Write parent and child files, load them as the CLI does, register them; return the text."""
    (folder / "child.yaml").write_text(CHILD)
    (folder / "parent.yaml").write_text(parent)
    composed = load_with_children(folder / "parent.yaml")
    await register_files(bus.js, composed.files)
    return composed.files[0].text


async def _children_started(bus: Bus, parent_id: str) -> list[dict[str, Any]]:
    """`execution.started` events of every child of `parent_id`, as the event stream holds them."""
    stored = await stored_messages(bus.js, "noetl.events.*.execution.started")
    events = [jsonutil.loads(data) for _, data in stored]
    return [e for e in events if e.get("parent_execution_id") == parent_id]


async def test_parent_waits_for_the_child_and_reads_its_result(bus: Bus, services: None,
                                                               tmp_path: Path) -> None:
    text = await _register(bus, tmp_path, PARENT)

    final = await submit_and_watch(bus, playbook_text=text, playbook_file="parent.yaml",
                                   payload={"n": 5}, on_event=lambda e: None,
                                   execution_id="sub1", timeout_s=30)

    assert final["status"] == "completed", final.get("error")
    assert final["steps"]["start"]["result"] == {"square": 25}
    assert final["result"] == 26
    (started,) = await _children_started(bus, "sub1")
    child_id = started["execution_id"]
    # Numeric like every execution id, so a child can store its id in a BIGINT column too.
    assert 0 < int(child_id) < 2**63 and child_id == str(int(child_id))
    child_events = await stored_events(bus.js, child_id)
    assert {e["event_type"] for e in child_events} >= {"execution.started", "task.started",
                                                       "step.done", "execution.completed"}
    assert all(e.get("parent_execution_id") == "sub1" for e in child_events)


async def test_child_failure_fails_the_parent_step_with_the_child_message(
        bus: Bus, services: None, tmp_path: Path) -> None:
    text = await _register(bus, tmp_path, PARENT)

    final = await submit_and_watch(bus, playbook_text=text, playbook_file="parent.yaml",
                                   payload={"fail": True}, on_event=lambda e: None,
                                   execution_id="sub2", timeout_s=30)

    assert final["status"] == "failed"
    assert final["steps"]["start"]["status"] == "failed"
    assert "child refuses n=3" in final["error"]["message"]
    assert final["steps"]["start"]["error"]["kind"] == "playbook"
    assert "use" not in final["steps"]


async def test_async_child_returns_its_id_at_once_and_runs_to_the_end(
        bus: Bus, services: None, tmp_path: Path) -> None:
    text = await _register(bus, tmp_path, ASYNC_PARENT)

    final = await submit_and_watch(bus, playbook_text=text, playbook_file="parent.yaml",
                                   payload={}, on_event=lambda e: None, execution_id="sub3",
                                   timeout_s=30)

    assert final["status"] == "completed", final.get("error")
    child_id = final["result"]["execution_id"]
    # The shape NoETL's playbook tool answers when it starts a child and goes on.
    assert final["result"] == {"status": "started", "execution_id": child_id,
                               "path": "./child.yaml", "async": True}
    watch = ExecutionWatch(bus, child_id)
    await watch.start()
    try:
        child_final = await watch.wait(30)
    finally:
        await watch.stop()
    assert child_final["status"] == "completed"
    assert child_final["result"] == {"square": 16}
    assert child_final["parent_execution_id"] == "sub3"


async def test_child_named_by_catalog_path_runs_the_registered_version(
        bus: Bus, services: None) -> None:
    child = parse_playbook(CHILD).playbook
    await register_files(bus.js, [PlaybookFile("child.yaml", CHILD, ids.playbook_key(CHILD), child)])
    await register_path(bus.js, child, ids.playbook_key(CHILD))
    parent = PARENT.replace("./child.yaml", "tests/child")

    final = await submit_and_watch(bus, playbook_text=parent, playbook_file="parent.yaml",
                                   payload={"n": 2}, on_event=lambda e: None, timeout_s=30)

    assert final["status"] == "completed", final.get("error")
    assert final["result"] == 5


async def test_unknown_catalog_path_fails_the_step_and_says_how_to_register(
        bus: Bus, services: None) -> None:
    parent = PARENT.replace("./child.yaml", "nowhere/child")

    final = await submit_and_watch(bus, playbook_text=parent, playbook_file="parent.yaml",
                                   payload={}, on_event=lambda e: None, timeout_s=30)

    assert final["status"] == "failed"
    assert 'playbook "nowhere/child" is not in the catalog' in final["error"]["message"]
    assert "noetl-stream register" in final["error"]["message"]


async def test_running_the_tool_twice_for_one_task_attempt_starts_one_child(
        bus: Bus, services: None) -> None:
    key = ids.playbook_key(CHILD)
    child = parse_playbook(CHILD).playbook
    await register_files(bus.js, [PlaybookFile("child.yaml", CHILD, key, child)])
    await register_path(bus.js, child, key)
    tool = PlaybookTool(ToolServices(nats=bus.nc, follow_events=event_follower(bus.nc)))
    call = TaskCall(execution_id="twice", step="start", task="start_task", kind="playbook",
                    config={"path": "tests/child"}, input={"n": 7}, spec={},
                    idempotency_key="twice.start.1:None:start_task:1")

    # Two deliveries at once (a redelivery while the first worker still waits) ...
    first, second = await asyncio.gather(tool.run(call), tool.run(call))
    # ... and one after the child has finished (read from KV noetl_executions).
    third = await tool.run(call)

    assert first.result == second.result == third.result == {"square": 49}
    child_id = ids.child_execution_id("twice", call.idempotency_key)
    assert first.meta == third.meta == {"execution_id": child_id}
    assert [e["execution_id"] for e in await _children_started(bus, "twice")] == [child_id]
    # A new attempt of the task is a new child.
    retry = await tool.run(dataclasses.replace(call, idempotency_key="twice.start.1:None:start_task:2"))
    assert retry.ok and retry.meta["execution_id"] != child_id
    assert len(await _children_started(bus, "twice")) == 2


def _large_child(steps: int, size: int) -> str:
    """A chain of `steps` python steps, each returning `size` bytes of padding."""
    chain = "".join(
        f"  - step: s{i}\n"
        f"    tool: {{kind: python, code: 'result = {{\"n\": {i}, \"pad\": \"x\" * {size}}}'}}\n"
        + (f"    next: s{i + 1}\n" if i < steps else "")
        for i in range(1, steps + 1))
    return ("apiVersion: noetl.io/v2\nkind: Playbook\n"
            "metadata: {name: large-child, path: tests/large-child}\nworkflow:\n" + chain)


async def test_return_step_reads_a_step_of_a_summary_sent_by_reference(
        bus: Bus, services: None) -> None:
    # Results under the payload limit stay inline; twenty of them make a summary over half of
    # the test server's 8 MiB message, so its `steps` go by reference.
    text = _large_child(20, 240_000)
    key = ids.playbook_key(text)
    child = parse_playbook(text).playbook
    await register_files(bus.js, [PlaybookFile("large-child.yaml", text, key, child)])
    await register_path(bus.js, child, key)
    tool = PlaybookTool(ToolServices(nats=bus.nc, follow_events=event_follower(bus.nc)))
    call = TaskCall(execution_id="large", step="start", task="start_task", kind="playbook",
                    config={"path": "tests/large-child", "return_step": "s2"}, input={},
                    spec={}, idempotency_key="large.start.1:None:start_task:1")

    waited = await tool.run(call)  # from the child's end event
    again = await tool.run(call)  # from its committed state, the results stored beside it

    child_id = ids.child_execution_id("large", call.idempotency_key)
    (end,) = [e for e in await stored_events(bus.js, child_id)
              if e["event_type"] == "execution.completed"]
    assert refs.ref_of(end["steps"]) is not None
    assert waited.ok and again.ok, (waited.error, again.error)
    assert waited.result == again.result == {"n": 2, "pad": "x" * 240_000}


async def test_loop_of_six_children_starts_six_even_when_a_worker_dies_mid_command(
        bus: Bus, tmp_path: Path) -> None:
    decl = bus.topology.pool_consumer("default")
    # A short AckWait on this test's private server, so the lost command comes back within a second.
    await bus.js.add_consumer(decl.stream, consumer_config(dataclasses.replace(decl, ack_wait_s=1.0)))
    text = await _register(bus, tmp_path, LOOP_PARENT)
    services = ToolServices(nats=bus.nc, follow_events=event_follower(bus.nc))
    doomed = await ToolRegistry.create(services=services, python_children=1, python_warm=0)

    async with run_services(bus, worker=False):
        watch = ExecutionWatch(bus, "loop6")
        await watch.start()
        await bus.js.publish("noetl.requests.execute", jsonutil.dumps(
            {"execution_id": "loop6", "playbook": text, "playbook_file": "parent.yaml"}),
            headers={"Nats-Msg-Id": "req:loop6"})
        # A worker takes one iteration's command, starts its child, and dies before acking.
        lost_sub = await bus.js.pull_subscribe_bind(decl.durable, stream=decl.stream)
        (lost,) = await lost_sub.fetch(1, timeout=10)
        command = jsonutil.loads(lost.data)
        prefix = f"{command['step_run_id']}:{command['iteration']}"
        dying = asyncio.create_task(Pipeline(Command.model_validate(command),
                                             doomed, idempotency_prefix=prefix).run())
        await assert_eventually(lambda: _has_children(bus, "loop6", 1), timeout_s=10)
        dying.cancel()
        await lost_sub.unsubscribe()
        await doomed.close()

        async with run_services(bus, server=False, python_children=2):
            final = await watch.wait(60)
        await watch.stop()

    assert final["status"] == "completed", final.get("error")
    assert final["result"] == [{"square": n * n} for n in range(1, 7)]
    children = await _children_started(bus, "loop6")
    assert len(children) == 6
    assert len({c["execution_id"] for c in children}) == 6
    # The lost command did come back: more deliveries than commands stored.
    info = await bus.js.consumer_info(decl.stream, decl.durable)
    stored = (await bus.js.stream_info(decl.stream)).state.last_seq
    assert info.delivered.consumer_seq > stored


async def _has_children(bus: Bus, parent_id: str, count: int) -> None:
    assert len(await _children_started(bus, parent_id)) >= count
