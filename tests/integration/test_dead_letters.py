"""Dead letters: a command no worker ever finishes is copied into NOETL_DLQ, removed from the work
queue and its step failed with kind `dead_letter`, even when no server ran at its last delivery;
a command no worker can read lands there too, and the worker goes on serving."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from nats.aio.msg import Msg
from nats.errors import TimeoutError as NatsTimeoutError

from noetl_stream.bus.connection import Bus
from noetl_stream.bus.dead_letters import (
    REASON_MAX_DELIVERIES,
    REASON_UNREADABLE,
    DeadLetter,
    list_dead_letters,
)
from noetl_stream.bus.provision import consumer_config
from noetl_stream.services import run_services, submit_and_watch
from noetl_stream.testing.events import stored_events
from noetl_stream.testing.waiting import assert_eventually
from playbook_files import read_playbook

pytestmark = pytest.mark.integration

CLI = Path(sys.executable).with_name("noetl-stream")
MAX_DELIVER = 3

ONE_STEP = read_playbook("integration", "one_step.yaml")


@contextlib.asynccontextmanager
async def dying_worker(bus: Bus) -> AsyncIterator[list[Msg]]:
    """A worker that takes every command of the default pool and dies before acknowledging it:
    it keeps fetching, so JetStream redelivers each command until its last delivery."""
    decl = bus.topology.pool_consumer("default")
    sub = await bus.js.pull_subscribe_bind(decl.durable, stream=decl.stream)
    taken: list[Msg] = []

    async def take() -> None:
        while True:
            try:
                taken.extend(await sub.fetch(8, timeout=0.5))
            except (TimeoutError, NatsTimeoutError):
                continue

    task = asyncio.create_task(take())
    try:
        yield taken
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await sub.unsubscribe()


async def short_lease(bus: Bus) -> None:
    """A one-second lease and three deliveries on this test's private server."""
    decl = bus.topology.pool_consumer("default")
    await bus.js.add_consumer(decl.stream, consumer_config(
        dataclasses.replace(decl, ack_wait_s=1.0, max_deliver=MAX_DELIVER)))


async def run_cli(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        str(CLI), *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL, env=dict(os.environ))
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def one_dead_letter(bus: Bus) -> DeadLetter:
    letters = await list_dead_letters(bus)
    assert len(letters) == 1, letters
    return letters[0]


async def commands_left(bus: Bus) -> None:
    assert (await bus.js.stream_info("NOETL_COMMANDS")).state.messages == 0


def url_of(bus: Bus) -> str:
    assert bus.nc.connected_url is not None
    return bus.nc.connected_url.geturl()


async def test_command_never_acknowledged_is_dead_lettered_and_its_step_fails(bus: Bus) -> None:
    await short_lease(bus)
    events: list[dict[str, Any]] = []
    async with dying_worker(bus) as taken, run_services(bus, worker=False):
        final = await submit_and_watch(bus, playbook_text=ONE_STEP, playbook_file="one.yaml",
                                       payload={}, on_event=events.append, execution_id="dead1",
                                       timeout_s=60)

    assert final["event_type"] == "execution.failed", final
    assert [m.metadata.num_delivered for m in taken] == [1, 2, 3]
    (failed,) = [e for e in events if e["event_type"] == "step.failed"]
    letter = await one_dead_letter(bus)
    assert failed["error"] == {
        "kind": "dead_letter",
        "message": f"command delivered 3 times without an outcome (worker crashed or lost it); "
                   f"dead-lettered as {letter.seq}"}
    assert (letter.execution_id, letter.step, letter.step_run_id, letter.iteration) == \
        ("dead1", "start", "dead1.start.1", None)
    assert (letter.deliveries, letter.reason) == (MAX_DELIVER, REASON_MAX_DELIVERIES)
    assert letter.subject == "noetl.commands.default.python"
    assert letter.data == taken[0].data
    await assert_eventually(lambda: commands_left(bus))
    stored = await stored_events(bus.js, "dead1")
    assert sum(1 for e in stored if e["event_type"] == "step.failed") == 1

    code, out, err = await run_cli("dlq", "list", "--json", "--nats-url", url_of(bus))
    assert code == 0, err
    (listed,) = [json.loads(line) for line in out.splitlines()]
    assert listed["seq"] == letter.seq
    assert (listed["execution_id"], listed["step"], listed["deliveries"], listed["reason"]) == \
        ("dead1", "start", MAX_DELIVER, REASON_MAX_DELIVERIES)

    code, out, err = await run_cli("dlq", "list", "--nats-url", url_of(bus))
    assert code == 0, err
    _, row = out.splitlines()
    assert row.split()[0] == str(letter.seq) and "dead1" in row and "max_deliveries" in row

    code, out, err = await run_cli("dlq", "show", str(letter.seq), "--nats-url", url_of(bus))
    assert code == 0, err
    assert json.loads(out)["command"]["step_run_id"] == "dead1.start.1"

    code, out, err = await run_cli("dlq", "purge", "--all", "--nats-url", url_of(bus))
    assert (code, out.strip()) == (0, "removed 1 dead letter"), err
    assert await list_dead_letters(bus) == []


async def test_last_delivery_while_no_server_runs_is_dead_lettered_when_one_starts(bus: Bus) -> None:
    await short_lease(bus)
    events: list[dict[str, Any]] = []
    async with dying_worker(bus) as taken:
        async with run_services(bus, worker=False):
            await bus.js.publish("noetl.requests.execute", json.dumps(
                {"execution_id": "dead2", "playbook": ONE_STEP}).encode())

            def command_taken() -> None:
                assert taken

            await assert_eventually(command_taken, timeout_s=20)

        async def advisory_kept() -> None:
            assert (await bus.js.stream_info("NOETL_ADVISORIES")).state.messages == 1

        # JetStream announces the last delivery with no server running; the stream keeps it.
        await assert_eventually(advisory_kept, timeout_s=20)
        async with run_services(bus, worker=False):
            final = await submit_and_watch(bus, playbook_text=ONE_STEP, playbook_file="one.yaml",
                                           payload={}, on_event=events.append,
                                           execution_id="dead2", timeout_s=60)

    assert final["event_type"] == "execution.failed", final
    (failed,) = [e for e in events if e["event_type"] == "step.failed"]
    assert failed["error"]["kind"] == "dead_letter"
    assert (await one_dead_letter(bus)).execution_id == "dead2"
    await assert_eventually(lambda: commands_left(bus))


async def test_unreadable_command_is_dead_lettered_and_the_worker_keeps_serving(bus: Bus) -> None:
    async with run_services(bus, python_children=1):
        await bus.js.publish("noetl.commands.default.python", b"\x00 not a command",
                             headers={"Nats-Msg-Id": "poison1"})
        letter = await assert_eventually(lambda: one_dead_letter(bus), timeout_s=20)
        final = await submit_and_watch(bus, playbook_text=ONE_STEP, playbook_file="one.yaml",
                                       payload={}, on_event=lambda e: None, timeout_s=60)

    assert final["event_type"] == "execution.completed", final
    assert (letter.reason, letter.subject, letter.deliveries) == \
        (REASON_UNREADABLE, "noetl.commands.default.python", 1)
    assert letter.data == b"\x00 not a command"
    assert letter.execution_id is None
    assert (letter.failure, letter.detail.split(":")[0]) == ("malformed_json", "not JSON")
    await commands_left(bus)


@pytest.mark.parametrize("context", [[1, 2], "ctx", 7])
async def test_command_whose_context_is_not_a_mapping_is_dead_lettered_at_once(
        bus: Bus, context: Any) -> None:
    command = {"execution_id": "1", "step": "start", "step_run_id": "1.start.1",
               "iteration": None, "tasks": [], "context": context}
    async with run_services(bus, server=False, python_children=1):
        await bus.js.publish("noetl.commands.default.python", json.dumps(command).encode(),
                             headers={"Nats-Msg-Id": f"ctx-{type(context).__name__}"})
        letter = await assert_eventually(lambda: one_dead_letter(bus), timeout_s=20)

    assert (letter.reason, letter.deliveries) == (REASON_UNREADABLE, 1)
    assert letter.failure == "schema" and letter.execution_id == "1"
    assert letter.detail.startswith("context: Input should be a valid dictionary"), letter.detail
    await commands_left(bus)


async def test_a_context_scope_that_is_not_a_mapping_is_dead_lettered_naming_it(bus: Bus) -> None:
    command = {"execution_id": "1", "step": "start", "step_run_id": "1.start.1",
               "iteration": None, "tasks": [], "context": {"workload": [1]}}
    async with run_services(bus, server=False, python_children=1):
        await bus.js.publish("noetl.commands.default.python", json.dumps(command).encode(),
                             headers={"Nats-Msg-Id": "ctx-workload"})
        letter = await assert_eventually(lambda: one_dead_letter(bus), timeout_s=20)

    assert (letter.reason, letter.failure) == (REASON_UNREADABLE, "schema")
    assert letter.detail == "context.workload: Input should be a valid dictionary", letter.detail


async def test_a_task_the_worker_cannot_read_fails_its_step_and_is_not_dead_lettered(
        bus: Bus) -> None:
    # A readable command whose task this worker does not know (a newer router's field): the
    # step fails with the reason, so the execution learns of it at once.
    command = {"execution_id": "t1", "step": "start", "step_run_id": "t1.start.1",
               "iteration": None, "context": {},
               "tasks": [{"name": "start_task", "kind": "noop", "from_a_newer_router": 1}]}
    async with run_services(bus, server=False, python_children=1):
        await bus.js.publish("noetl.commands.default.noop", json.dumps(command).encode(),
                             headers={"Nats-Msg-Id": "newer-task"})

        async def failed() -> dict[str, Any]:
            events = [e for e in await stored_events(bus.js, "t1")
                      if e["event_type"] == "step.failed"]
            assert len(events) == 1, events
            return events[0]

        event = await assert_eventually(failed, timeout_s=20)

    assert event["error"]["kind"] == "command", event
    assert event["error"]["message"].startswith("malformed command:"), event
    assert "from_a_newer_router" in event["error"]["message"], event
    assert await list_dead_letters(bus) == []
    await commands_left(bus)
