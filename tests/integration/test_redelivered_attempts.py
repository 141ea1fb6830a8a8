"""A command redelivered to a worker runs again only when its attempt stored no outcome
(worker/attempt_claims.py, worker/start_scan.py, worker/outcome_lookup.py; docs/reliability.md,
promise 2 and "Tasks longer than the duplicate window"). Real parts: a nats-server whose user `lossy` may not
acknowledge anything (every acknowledgement it sends is lost), the server and workers on their
own connections, and a local HTTP service that counts the calls each step makes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from local_http import HttpService
from noetl_stream import ids
from noetl_stream.bus.connection import Bus, connect
from noetl_stream.bus.nats_server import free_port
from noetl_stream.bus.provision import provision
from noetl_stream.services import run_services, submit_and_watch
from noetl_stream.subjects import load_topology
from noetl_stream.testing.cluster import start_node, stop_node
from noetl_stream.testing.events import stored_events
from noetl_stream.testing.waiting import assert_eventually
from noetl_stream.worker.start_scan import Scan, starts_of

pytestmark = pytest.mark.integration

ACK_WAIT_S = 2  # the pool consumer's lease: a command whose ack is lost comes back this soon
POOL_DURABLE = "noetl-workers-default"

PLAYBOOK = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: redelivered
  path: tests/redelivered
workload:
  url: "http://127.0.0.1:1"
  path: "/flaky/once"
workflow:
  - step: start
    next: call
  - step: call
    tool:
      kind: http
      method: GET
      url: "{{ workload.url }}{{ workload.path }}"
"""


class Node:
    def __init__(self, port: int) -> None:
        self.port = port

    async def connect(self, user: str) -> Bus:
        url = f"nats://{user}:{user}-secret@127.0.0.1:{self.port}"
        return await connect(url, name=f"test-{user}")


@pytest.fixture
async def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Node]:
    """A nats-server with two users: `noetl` may do anything, `lossy` anything but acknowledge
    (its `$JS.ACK.>` publishes are refused, as an ack lost on the way would be); the pool's
    lease is ACK_WAIT_S."""
    monkeypatch.setenv("NOETL_STREAM_COMMAND_ACK_WAIT_S", str(ACK_WAIT_S))
    load_topology.cache_clear()
    port = free_port()
    conf = tmp_path / "lossy.conf"
    conf.write_text(
        f"listen: 127.0.0.1:{port}\n"
        f'jetstream {{\n  store_dir: "{tmp_path / "js"}"\n}}\n'
        "authorization {\n  users: [\n"
        '    {user: noetl, password: "noetl-secret"}\n'
        '    {user: lossy, password: "lossy-secret",'
        ' permissions: {publish: {deny: ["$JS.ACK.>"]}}}\n'
        "  ]\n}\n")
    log = tmp_path / "nats-server.log"
    process = start_node(conf, log)
    try:
        async def provisioned() -> None:
            assert process.poll() is None, log.read_text()
            try:
                bus = await Node(port).connect("noetl")
            except Exception as exc:
                raise AssertionError(f"nats-server not up yet: {exc}") from exc
            try:
                await provision(bus)
            finally:
                await bus.close()

        await assert_eventually(provisioned)
        yield Node(port)
    finally:
        stop_node(process)
        load_topology.cache_clear()


async def run_playbook(bus: Bus, url: str, path: str) -> dict[str, Any]:
    final = await submit_and_watch(bus, playbook_text=PLAYBOOK, playbook_file="redelivered.yaml",
                                   payload={"url": url, "path": path}, on_event=lambda _: None,
                                   timeout_s=60)
    assert final["event_type"] == "execution.completed", final
    return final


async def waiting_commands(bus: Bus) -> int:
    return int((await bus.js.stream_info("NOETL_COMMANDS")).state.messages)


async def test_a_command_redelivered_after_its_outcome_was_stored_does_not_run_again(
        node: Node, http_service: HttpService) -> None:
    bus, lossy = await node.connect("noetl"), await node.connect("lossy")
    try:
        claims: list[str] = []

        async def tap(msg: Any) -> None:
            claims.append(msg.subject)

        # Every write to KV claims, as nats-server receives it: none (the start is the claim).
        await bus.nc.subscribe("$KV.noetl_step_results.*.claim.*", cb=tap)
        async with run_services(bus, worker=False):
            async with run_services(lossy, server=False, python_children=1):
                final = await run_playbook(bus, http_service.url, "/flaky/once")
            # The outcomes are stored and the execution done; no ack arrived: both commands
            # (`start`, a noop, and `call`) wait.
            assert await waiting_commands(bus) == 2
            assert http_service.calls["once"] == 1
            async with run_services(bus, server=False, python_children=1):
                async def acknowledged() -> None:
                    assert await waiting_commands(bus) == 0

                await assert_eventually(acknowledged, timeout_s=30)
        info = await bus.js.consumer_info("NOETL_COMMANDS", POOL_DURABLE)
        # Each command was delivered once, then again.
        assert info.delivered.consumer_seq == info.delivered.stream_seq + 2
        assert http_service.calls["once"] == 1
        events = await stored_events(bus.js, final["execution_id"])
        assert [e["step"] for e in events if e["event_type"] == "step.done"] == ["start", "call"]
        # One stored start per command, each naming the stored message that took it: the
        # redeliveries found it and stored no other.
        for e in events:
            if e["event_type"] == "task.started":
                run = (final["execution_id"], e["step_run_id"])
                [start] = await starts_of(bus, Scan(run[0], ids.event_msg_id(
                    run[0], "task.started", run[1], None)))
                assert start.copy is not None and start.copy.startswith("publish:")
        assert [e["step"] for e in events if e["event_type"] == "task.started"] == [
            "start", "call"]
        assert claims == []
    finally:
        await lossy.close()
        await bus.close()


async def test_a_command_redelivered_before_its_outcome_was_stored_runs_again(
        node: Node, http_service: HttpService) -> None:
    """Its worker stopped while the call was on the wire: the redelivery of the same message
    runs the step again (at least once), and the step completes once."""
    bus, first = await node.connect("noetl"), await node.connect("noetl")
    try:
        async with run_services(bus, worker=False):
            async with run_services(first, server=False, python_children=1):
                running = asyncio.create_task(
                    run_playbook(bus, http_service.url, "/slow?s=3&key=held"))

                async def called() -> None:
                    assert http_service.calls["slow:held"] == 1

                await assert_eventually(called, timeout_s=30)
            # The first worker is gone with its call in flight; no outcome was stored.
            async with run_services(bus, server=False, python_children=1):
                final = await asyncio.wait_for(running, 60)
        assert http_service.calls["slow:held"] == 2
        events = await stored_events(bus.js, final["execution_id"])
        done = [e for e in events if e["event_type"] == "step.done" and e["step"] == "call"]
        assert len(done) == 1 and done[0]["result"] == {"slept": 3.0}
        assert any(e["event_type"] == "task.redelivered" for e in events)
    finally:
        await first.close()
        await bus.close()
