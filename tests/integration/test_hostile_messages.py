"""Hostile messages against a real nats-server, server and worker: no single message takes a
consumer down. Each test reproduces a message that did, on the build before typed messages:

- a request whose execution id is 4,200 characters made the server build a subject past
  nats-server's control-line limit, which closed the server's connection on every redelivery;
- events whose execution id is no KV key (`c:1`, `has space`) failed their whole batch, which
  was redelivered up to max_deliver while routing stood still;
- a `cancel.requested` body on a `step.done` subject cancelled another execution;
- a 4,200-character signal name through the HTTP API cut the connection the router shares.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import aiohttp
import nats
import pytest
from nats.aio.client import Client

from noetl_stream.api import serve
from noetl_stream.bus.connection import Bus, own_connection
from noetl_stream.bus.dead_letters import list_dead_letters
from noetl_stream.bus.nats_server import NatsServer
from noetl_stream.server.execution_ids import new_execution_id
from noetl_stream.services import run_services, submit_and_watch
from noetl_stream.testing.waiting import assert_eventually
from playbook_files import read_playbook

pytestmark = pytest.mark.integration

LONG_ID = "x" * 4200

ONE_STEP = read_playbook("integration", "hostile_messages_one_step.yaml")

WAITS = read_playbook("integration", "hostile_messages_waits.yaml")


async def run_one(bus: Bus, timeout_s: float = 20) -> tuple[dict[str, Any], float]:
    started = time.monotonic()
    final = await submit_and_watch(bus, playbook_text=ONE_STEP, playbook_file="one.yaml",
                                   payload={}, on_event=lambda e: None, timeout_s=timeout_s)
    return final, time.monotonic() - started


def reconnects(bus: Bus) -> int:
    return int(bus.nc.stats["reconnects"])


async def drained(bus: Bus, stream: str, durable: str) -> Any:
    info = await bus.js.consumer_info(stream, durable)
    assert (info.num_pending, info.num_ack_pending) == (0, 0), info
    return info


async def router_drained(bus: Bus) -> int:
    """Every partition of the router's stream drained; how many events were redelivered."""
    infos = [await drained(bus, c.stream, c.durable)
             for c in bus.topology.router_decl().consumers()]
    return sum(i.num_redelivered for i in infos)


async def request(client: Client, subject: str, body: dict[str, Any]) -> dict[str, Any]:
    """Publish a request into the stream with a reply inbox, as any client may."""
    inbox = client.new_inbox()
    sub = await client.subscribe(inbox, max_msgs=1)
    await client.publish(subject, json.dumps({**body, "reply_to": inbox}).encode())
    msg = await sub.next_msg(timeout=10)
    reply: dict[str, Any] = json.loads(msg.data)
    return reply


async def test_an_oversized_execution_id_is_refused_and_never_cuts_the_server(
        bus: Bus, nats_server: NatsServer) -> None:
    client = await nats.connect(nats_server.url)
    try:
        async with run_services(bus, python_children=1):
            start = await request(client, "noetl.requests.execute",
                                  {"execution_id": LONG_ID, "playbook": ONE_STEP})
            cancel = await request(client, "noetl.requests.cancel", {"execution_id": LONG_ID})
            await assert_eventually(lambda: drained(bus, "NOETL_REQUESTS",
                                                    "noetl-server-requests"))
            final, took = await run_one(bus)
    finally:
        await client.close()

    assert start["accepted"] is False and start["execution_id"] is None
    assert "at most 128 characters (this one 4200)" in start["errors"][0]
    assert cancel["accepted"] is False and "at most 128" in cancel["errors"][0]
    info = await drained(bus, "NOETL_REQUESTS", "noetl-server-requests")
    assert info.num_redelivered == 0  # terminated at once, not redelivered to max_deliver
    assert reconnects(bus) == 0, "nats-server closed the server's connection"
    assert final["event_type"] == "execution.completed" and took < 10


async def test_a_flood_of_events_with_invalid_ids_is_dead_lettered_while_routing_goes_on(
        bus: Bus) -> None:
    flood = 300
    async with run_services(bus, python_children=1):
        sends = []
        for i in range(flood):
            if i % 3 == 0:  # a subject token, but no KV key
                sends.append(bus.js.publish("noetl.events.c:1.signal.go", b"{}"))
            elif i % 3 == 1:  # a body naming an execution id that is no subject token
                sends.append(bus.js.publish(
                    f"noetl.events.e{i}.step.done.default",
                    json.dumps({"execution_id": "has space", "step": "a",
                                "step_run_id": "x.a.1"}).encode()))
            else:
                sends.append(bus.js.publish("noetl.events.c:1.step.done.default",
                                            json.dumps({"step": "a"}).encode()))
        await asyncio.gather(*sends)
        final, took = await run_one(bus)
        redelivered = await assert_eventually(lambda: router_drained(bus), timeout_s=30)
        letters = await list_dead_letters(bus, limit=flood + 10)

    assert final["event_type"] == "execution.completed" and took < 10, (final, took)
    assert redelivered == 0, "refused events were handed back instead of terminated"
    assert len(letters) == flood
    assert {letter.failure for letter in letters} == {"schema", "subject_mismatch"}
    assert reconnects(bus) == 0


async def test_a_body_cannot_cancel_another_execution_through_its_subject(bus: Bus) -> None:
    victim = new_execution_id()
    events: list[dict[str, Any]] = []
    async with run_services(bus, python_children=1):
        run = asyncio.create_task(submit_and_watch(
            bus, playbook_text=WAITS, playbook_file="waits.yaml", payload={},
            on_event=events.append, execution_id=victim, timeout_s=30))
        await assert_eventually(lambda: [e for e in events if e["event_type"] == "step.started"
                                         and e.get("step") == "wait"] or _fail(), timeout_s=15)
        forged = {"event_type": "execution.cancel.requested", "execution_id": victim,
                  "reason": "forged", "timestamp": time.time()}
        await bus.js.publish(f"noetl.events.{new_execution_id()}.step.done.default",
                             json.dumps(forged).encode())
        letters = await assert_eventually(lambda: _one_letter(bus), timeout_s=15)
        await router_drained(bus)
        await bus.js.publish(f"noetl.events.{victim}.signal.go", b"{}")
        final = await run

    assert letters[0].failure == "subject_mismatch"
    assert "execution_id" in letters[0].detail or "event_type" in letters[0].detail
    assert final["event_type"] == "execution.completed", final
    assert "execution.cancel.requested" not in [e["event_type"] for e in events]


def _fail() -> None:
    raise AssertionError("not yet")


async def _one_letter(bus: Bus) -> list[Any]:
    letters = await list_dead_letters(bus)
    assert letters
    return letters


async def test_the_http_api_refuses_an_oversized_signal_name_and_keeps_the_router_running(
        bus: Bus) -> None:
    execution_id = new_execution_id()
    async with run_services(bus, python_children=1), \
            serve(bus, host="127.0.0.1", port=0, auth=False) as url, \
            aiohttp.ClientSession() as http:
        run = asyncio.create_task(submit_and_watch(
            bus, playbook_text=WAITS, playbook_file="waits.yaml", payload={},
            on_event=lambda e: None, execution_id=execution_id, timeout_s=30))
        base = f"{url}/api/executions"

        async def running() -> None:
            async with http.get(f"{base}/{execution_id}") as resp:
                assert resp.status == 200 and (await resp.json())["status"] == "running"

        await assert_eventually(running, timeout_s=15)
        async with http.post(f"{base}/{execution_id}/signals/{'s' * 4200}", json={}) as resp:
            long_name = (resp.status, await resp.json())
        async with http.post(f"{base}/{LONG_ID}/cancel", json={}) as resp:
            long_cancel = resp.status

        async def go() -> None:
            # 409 until the listening step waits: `running` does not mean it has got there yet.
            async with http.post(f"{base}/{execution_id}/signals/go", json={}) as resp:
                assert resp.status == 202, await resp.text()

        await assert_eventually(go, timeout_s=15)
        final = await run

    assert long_name[0] == 422 and "at most 128 characters" in long_name[1]["error"]["message"]
    assert long_cancel == 404
    assert final["event_type"] == "execution.completed", final
    assert reconnects(bus) == 0


async def test_a_connection_the_api_loses_is_not_the_routers(bus: Bus) -> None:
    async with run_services(bus, python_children=1), \
            own_connection(bus, "noetl-stream-api") as api_bus:
        assert api_bus.nc is not bus.nc
        # A protocol violation nats-server answers by closing the connection that sent it.
        await api_bus.nc.publish("noetl." + "x" * 5000, b"")

        def cut() -> None:  # closed, or reconnecting, or back after a reconnect
            assert not api_bus.nc.is_connected or reconnects(api_bus) >= 1

        await assert_eventually(cut, timeout_s=10)
        final, took = await run_one(bus)

    assert final["event_type"] == "execution.completed" and took < 10
    assert reconnects(bus) == 0
