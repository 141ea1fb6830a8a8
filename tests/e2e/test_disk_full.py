"""A full JetStream store while steps run: `noetl-stream server` and `worker` as separate processes
on a nats-server whose `max_file_store` is filled up while every execution has a step running.

The outcomes that find no room are kept by their workers and written again once space comes back,
with the commands' leases held meanwhile, so no command burns its deliveries (the worker would
otherwise run the step again and again and, at max deliveries, its advisory would find no room
either: the execution stayed `running` for good). Outcomes already stored when the store fills
are held by the server, which cannot commit their states, with their leases renewed (they used
to be handed back once a second until their 20 deliveries were spent, and then never again).
Every execution completes once space is back.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from cli import CLI
from nats.js.api import StreamConfig
from nats.js.errors import APIError, KeyNotFoundError

from noetl_stream import jsonutil
from noetl_stream.bus.connection import Bus
from noetl_stream.bus.nats_server import MAX_PAYLOAD
from noetl_stream.bus.storage import storage_refusal
from noetl_stream.messages import ExecutionRequest, RequestReply
from noetl_stream.testing.cluster import small_store_node
from noetl_stream.testing.events import stored_events
from noetl_stream.testing.waiting import assert_eventually

pytestmark = pytest.mark.e2e

EXECUTIONS = 6
STORE_LIMIT = 48 * 1024 * 1024
FULL_FOR_S = 20.0  # longer than a command's max deliveries take on a 2 s lease
PLAYBOOK = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: through-a-full-disk
workflow:
  - step: slow
    tool:
      kind: python
      code: |
        import time
        time.sleep(3)
        result = {"slept": 3}
    next: [{step: after}]
  - step: after
    tool:
      kind: python
      input: {slept: "{{ slow.slept }}"}
      code: 'result = {"after": slept}'
"""


@pytest.fixture
async def small_store(tmp_path: Path) -> AsyncIterator[tuple[str, Bus]]:
    """A nats-server whose JetStream may hold 48 MB in all (the server process provisions it,
    with the short leases of the test's environment)."""
    async with small_store_node(tmp_path, STORE_LIMIT, name="disk-full-test",
                                max_payload=MAX_PAYLOAD) as (url, bus):
        yield url, bus


async def fill(bus: Bus) -> int:
    """Fill the store to the last byte with a stream of its own; the bytes written."""
    await bus.js.add_stream(StreamConfig(name="FILLER", subjects=["filler.>"]))
    written = 0
    for size in (1024 * 1024, 64 * 1024, 1024, 64):
        while True:
            try:
                await bus.js.publish("filler.x", b"x" * size)
            except APIError as exc:
                assert storage_refusal(exc), exc
                break
            written += size
    return written


async def submit(bus: Bus, execution_id: str) -> None:
    inbox = bus.nc.new_inbox()
    sub = await bus.nc.subscribe(inbox, max_msgs=1)
    request = ExecutionRequest(execution_id=execution_id, playbook=PLAYBOOK,
                               playbook_file="disk_full.yaml", reply_to=inbox)
    await bus.nc.publish("noetl.requests.execute", request.model_dump_json().encode())
    reply = RequestReply.model_validate_json((await sub.next_msg(timeout=30)).data)
    assert reply.accepted, reply.errors


async def status(bus: Bus, execution_id: str) -> dict[str, Any]:
    kv = await bus.js.key_value("noetl_executions")
    try:
        entry = await kv.get(execution_id)
    except KeyNotFoundError:
        return {}
    value = jsonutil.loads_object(entry.value or b"{}")
    return value or {}


class Processes:
    """`noetl-stream server` and `worker` as processes on the small store, short leases."""

    def __init__(self, url: str, logs: Path) -> None:
        self.env = {**os.environ, "NOETL_STREAM_NATS_URL": url,
                    "NOETL_STREAM_COMMAND_ACK_WAIT_S": "2", "NOETL_STREAM_COMMAND_MAX_DELIVER": "3",
                    "NOETL_STREAM_STORAGE_RETRY_S": "120",
                    # the streams' byte bounds fit the small store (JetStream reserves them in it)
                    "NOETL_STREAM_STORE_BYTES": str(STORE_LIMIT // 2)}
        self.logs = logs
        self.procs: dict[str, asyncio.subprocess.Process] = {}

    async def start(self, bus: Bus) -> None:
        for role, extra in (("server", []), ("worker", ["--python-processes", str(EXECUTIONS)])):
            with open(self.logs / f"{role}.log", "wb") as log:
                self.procs[role] = await asyncio.create_subprocess_exec(
                    str(CLI), role, *extra, stdin=asyncio.subprocess.DEVNULL, stdout=log,
                    stderr=log, env=self.env)

        async def provisioned() -> None:
            try:
                info = await bus.js.consumer_info("NOETL_COMMANDS", "noetl-workers-default")
            except Exception as exc:
                raise AssertionError(f"not provisioned yet: {exc}") from exc
            assert info.config.max_deliver == 3, info.config

        await assert_eventually(provisioned, timeout_s=30, interval_s=0.2)

    async def stop(self) -> None:
        for proc in self.procs.values():
            if proc.returncode is None:
                proc.send_signal(signal.SIGCONT)
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            await proc.wait()


@pytest.fixture
async def processes(small_store: tuple[str, Bus], tmp_path: Path) -> AsyncIterator[Processes]:
    url, bus = small_store
    procs = Processes(url, tmp_path)
    try:
        await procs.start(bus)
        yield procs
    finally:
        await procs.stop()


async def submit_all(bus: Bus, ids: list[str]) -> None:
    await asyncio.gather(*(submit(bus, eid) for eid in ids))

    async def every_slow_step_started() -> None:
        for eid in ids:
            events = await stored_events(bus.js, eid)
            assert any(e["event_type"] == "task.started" for e in events), eid

    await assert_eventually(every_slow_step_started, timeout_s=30, interval_s=0.2)


async def all_ended(bus: Bus, ids: list[str]) -> list[dict[str, Any]]:
    async def every_execution_ended() -> list[dict[str, Any]]:
        ended = [await status(bus, eid) for eid in ids]
        assert all(s.get("status") != "running" for s in ended), \
            [(eid, s.get("status")) for eid, s in zip(ids, ended, strict=True)]
        return ended

    return await assert_eventually(every_execution_ended, timeout_s=90, interval_s=0.5)


async def ran_once(bus: Bus, ids: list[str]) -> None:
    for eid in ids:
        events = await stored_events(bus.js, eid)
        # The outcome waited for room: the slow step ran once, with no redelivery.
        assert [e["event_type"] for e in events].count("task.redelivered") == 0, eid
        done = [e for e in events if e["event_type"] == "step.done"]
        assert sorted(e["step"] for e in done) == ["after", "slow"], eid


@pytest.mark.timeout(180)
async def test_a_full_store_while_steps_run_leaves_no_execution_running_once_space_is_back(
        small_store: tuple[str, Bus], processes: Processes) -> None:
    _, bus = small_store
    ids = [f"full{i}" for i in range(EXECUTIONS)]
    await submit_all(bus, ids)
    assert await fill(bus) > 0
    await asyncio.sleep(FULL_FOR_S)  # every slow step ends meanwhile, its outcome refused
    states = [await status(bus, eid) for eid in ids]
    assert all(s.get("status") == "running" for s in states), states
    await bus.js.delete_stream("FILLER")  # space comes back
    ended = await all_ended(bus, ids)
    assert [s.get("status") for s in ended] == ["completed"] * EXECUTIONS, ended
    await ran_once(bus, ids)


@pytest.mark.timeout(180)
async def test_outcomes_the_server_cannot_commit_on_a_full_store_are_held_not_dropped(
        small_store: tuple[str, Bus], processes: Processes) -> None:
    """The outcomes are stored and copied for the router while the server is stopped; the store
    fills; the server resumes and cannot commit any state for longer than its events' 20
    deliveries would last at one a second."""
    _, bus = small_store
    ids = [f"held{i}" for i in range(EXECUTIONS)]
    await submit_all(bus, ids)
    server = processes.procs["server"]
    server.send_signal(signal.SIGSTOP)

    async def outcomes_waiting_for_the_router() -> None:
        pending = 0
        for c in bus.topology.router_decl().consumers():
            pending += (await bus.js.consumer_info(c.stream, c.durable)).num_pending
        assert pending >= EXECUTIONS, pending

    await assert_eventually(outcomes_waiting_for_the_router, timeout_s=30, interval_s=0.2)
    assert await fill(bus) > 0
    server.send_signal(signal.SIGCONT)
    await asyncio.sleep(FULL_FOR_S + 8)
    states = [await status(bus, eid) for eid in ids]
    assert all(s.get("status") == "running" for s in states), states
    await bus.js.delete_stream("FILLER")
    ended = await all_ended(bus, ids)
    assert [s.get("status") for s in ended] == ["completed"] * EXECUTIONS, ended
    await ran_once(bus, ids)


RETRIED = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: retried-through-a-full-disk
workflow:
  - step: start
    tool:
      kind: python
      code: |
        import time
        time.sleep(4)
        raise RuntimeError("every attempt fails")
      retry:
        max_attempts: 2
        initial_delay: 0.05
"""


@pytest.mark.timeout(180)
async def test_a_retry_event_refused_by_a_full_store_waits_for_room_instead_of_failing_the_step(
        small_store: tuple[str, Bus], processes: Processes) -> None:
    """The store fills while a task is retried: the `retry.processed` event of its second
    attempt finds no room and is written again once space is back, as the outcome is; the step
    fails with the task's own error, not with the refusal."""
    _, bus = small_store
    inbox = bus.nc.new_inbox()
    sub = await bus.nc.subscribe(inbox, max_msgs=1)
    await bus.nc.publish("noetl.requests.execute", ExecutionRequest(
        execution_id="retried", playbook=RETRIED, playbook_file="retried.yaml",
        reply_to=inbox).model_dump_json().encode())
    assert RequestReply.model_validate_json((await sub.next_msg(timeout=30)).data).accepted

    async def first_attempt_started() -> None:
        events = await stored_events(bus.js, "retried")
        assert any(e["event_type"] == "task.started" for e in events)

    await assert_eventually(first_attempt_started, timeout_s=30, interval_s=0.1)
    assert await fill(bus) > 0  # the second attempt ends about 8 s after the first started
    await asyncio.sleep(14)
    assert (await status(bus, "retried")).get("status") == "running"
    await bus.js.delete_stream("FILLER")
    [ended] = await all_ended(bus, ["retried"])
    assert ended.get("status") == "failed", ended
    events = await stored_events(bus.js, "retried")
    assert [e["event_type"] for e in events].count("retry.processed") == 1, events
    [failed] = [e for e in events if e["event_type"] == "step.failed"]
    assert "every attempt fails" in failed["error"]["message"], failed["error"]
