"""What any client can make JetStream keep is bounded: every stream and the results store has a
byte bound (its share of NOETL_STREAM_STORE_BYTES), a signal's data at most 64 KiB, and the
shipped accounts config limits the account. Against a real nats-server, server and worker.
On the build before, no stream had a byte limit: 2,000 signals of 512 KB added 1 GB to the events
stream and 500 MB to the dead letters.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from nats.js.errors import APIError
from prometheus_client import REGISTRY

from noetl_stream.api import serve
from noetl_stream.bus.connection import Bus, connect
from noetl_stream.bus.nats_server import free_port
from noetl_stream.bus.provision import provision
from noetl_stream.bus.signals import publish_signal
from noetl_stream.bus.storage import describe, storage_refusal
from noetl_stream.errors import InfrastructureError
from noetl_stream.server.execution_ids import new_execution_id
from noetl_stream.services import run_services, submit_and_watch
from noetl_stream.subjects import load_topology
from noetl_stream.testing.cluster import render_node_config, small_store_node, start_node, stop_node
from noetl_stream.testing.nats import run_nats_server
from noetl_stream.testing.waiting import assert_eventually
from playbook_files import read_playbook

pytestmark = pytest.mark.integration

BUDGET = 64 * 1024 * 1024
WAITS = read_playbook("integration", "hostile_messages_waits.yaml")
ONE_STEP = read_playbook("integration", "hostile_messages_one_step.yaml")
ACCOUNTS_CONF = Path(__file__).resolve().parents[2] / "deploy" / "nats" / "accounts" / "accounts.conf"
# What a client can write: requests, signals (events, and their copies for the router), and the
# dead letters of what it sent; the results store holds what steps return.
CLIENT_REACHABLE = ("NOETL_REQUESTS", "NOETL_EVENTS", "NOETL_ROUTER", "NOETL_DLQ",
                    "NOETL_COMMANDS", "NOETL_ADVISORIES", "OBJ_noetl_results")


@pytest.fixture
async def bounded_bus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Bus]:
    """A provisioned bus whose topology was loaded with a 64 MiB store budget."""
    monkeypatch.setenv("NOETL_STREAM_STORE_BYTES", "64MiB")
    load_topology.cache_clear()  # read again with the budget (and again after the test)
    try:
        async with run_nats_server(tmp_path / "nats") as server:
            bus = await connect(server.url, name="bounds-test")
            try:
                await provision(bus)
                yield bus
            finally:
                await bus.close()
    finally:
        load_topology.cache_clear()


async def _bytes(bus: Bus, stream: str) -> tuple[int, int]:
    info = await bus.js.stream_info(stream)
    return int(info.state.bytes), int(info.config.max_bytes or -1)


async def test_every_stream_a_client_can_fill_has_a_byte_bound_within_the_budget(
        bounded_bus: Bus) -> None:
    bounds = {}
    for name in CLIENT_REACHABLE:
        info = await bounded_bus.js.stream_info(name)
        bounds[name] = (info.config.max_bytes, str(getattr(info.config.discard, "value",
                                                           info.config.discard)))
    assert all(max_bytes > 0 for max_bytes, _ in bounds.values()), bounds
    assert sum(max_bytes for max_bytes, _ in bounds.values()) <= BUDGET, bounds
    # Work queues refuse past their bound (writers wait for room); the event log and the dead
    # letters drop their oldest messages.
    assert {name: discard for name, (_, discard) in bounds.items()} == {
        "NOETL_REQUESTS": "new", "NOETL_EVENTS": "old", "NOETL_ROUTER": "new", "NOETL_DLQ": "old",
        "NOETL_COMMANDS": "new", "NOETL_ADVISORIES": "new", "OBJ_noetl_results": "new"}
    dlq = await bounded_bus.js.stream_info("NOETL_DLQ")
    assert dlq.config.max_msgs_per_subject == 1000


@pytest.mark.timeout(120)
async def test_a_flood_of_large_signals_stays_within_the_bounds_and_routing_goes_on(
        bounded_bus: Bus) -> None:
    bus = bounded_bus
    victim = new_execution_id()
    flood, size = 100, 512 * 1024
    async with run_services(bus, python_children=1):
        waiting = asyncio.create_task(submit_and_watch(
            bus, playbook_text=WAITS, playbook_file="waits.yaml", payload={},
            on_event=lambda e: None, execution_id=victim, timeout_s=90))
        # Through the client API: refused before anything is stored.
        with pytest.raises(ValueError, match="at most 65536 bytes"):
            await publish_signal(bus, victim, "junk", "x" * size)
        # As a raw NATS client: stored (the stream takes any message up to max_payload), then
        # refused by the router, which dead-letters it.
        body = b'"' + b"x" * (size - 2) + b'"'
        for i in range(flood):
            await bus.js.publish(f"noetl.events.{victim}.signal.junk", body,
                                 headers={"Nats-Msg-Id": f"flood-{i}"})

        async def router_drained() -> None:
            for c in bus.topology.router_decl().consumers():
                info = await bus.js.consumer_info(c.stream, c.durable)
                assert (info.num_pending, info.num_ack_pending) == (0, 0), info

        await assert_eventually(router_drained, timeout_s=60, interval_s=0.2)
        sizes = {name: await _bytes(bus, name) for name in ("NOETL_EVENTS", "NOETL_DLQ",
                                                             "NOETL_ROUTER")}
        await publish_signal(bus, victim, "go", {})
        final: dict[str, Any] = await waiting
        other = await submit_and_watch(bus, playbook_text=ONE_STEP, playbook_file="one.yaml",
                                       payload={}, on_event=lambda e: None, timeout_s=20)

    for name, (stored, bound) in sizes.items():
        assert bound > 0 and stored <= bound, (name, stored, bound)
    # The flood did land (50 MB against a 26 MB bound) and was refused by the router (too
    # large), its dead letters kept up to theirs.
    assert sizes["NOETL_EVENTS"][0] > sizes["NOETL_EVENTS"][1] // 2, sizes
    assert sizes["NOETL_DLQ"][0] > sizes["NOETL_DLQ"][1] // 2, sizes
    assert final["event_type"] == "execution.completed", final
    assert other["event_type"] == "execution.completed", other


async def test_the_shipped_accounts_config_limits_what_the_account_may_store(
        tmp_path: Path) -> None:
    port = free_port()
    text = re.sub(r"(?m)^listen:\s*\S+", f"listen: 127.0.0.1:{port}", ACCOUNTS_CONF.read_text())
    text = render_node_config(text, ports={8222: free_port()}, store_dir=tmp_path / "jetstream")
    conf = tmp_path / "accounts.conf"
    conf.write_text(text)
    process = start_node(conf, tmp_path / "nats-server.log", env={
        "NOETL_SERVER_PASSWORD": "s", "NOETL_WORKER_DEFAULT_PASSWORD": "w",
        "NOETL_CLIENT_PASSWORD": "c"})
    try:
        async def connected() -> Bus:
            assert process.poll() is None, (tmp_path / "nats-server.log").read_text()
            try:
                return await connect(f"nats://server:s@127.0.0.1:{port}", name="limits-test")
            except Exception as exc:
                raise AssertionError(f"not up yet: {exc}") from exc

        bus = await assert_eventually(connected)
        try:
            await provision(bus)  # the streams' default bounds fit the account's limit
            limits = (await bus.js.account_info()).limits
        finally:
            await bus.close()
    finally:
        stop_node(process)
    assert limits.max_storage == 8 * 1000**3, limits  # nats-server reads "8G" as 8e9
    assert limits.max_memory == 256 * 1000**2, limits
    assert limits.max_streams > 0 and limits.max_consumers > 0, limits


BIG_RESULT = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: big-result}
workflow:
  - step: big
    tool:
      kind: python
      code: 'result = "x" * (20 * 1024 * 1024)'
"""


@pytest.mark.timeout(120)
async def test_a_result_the_full_results_store_never_takes_fails_its_step_with_kind_storage(
        bounded_bus: Bus, monkeypatch: pytest.MonkeyPatch) -> None:
    # 20 MB against the results store's 16 MiB bound: refused however long it is retried.
    # 8 s: a refused 20 MB write itself takes a while on a loaded machine, and at least two
    # retries (after 0.5 s and 1 s) must fit in the bound.
    monkeypatch.setenv("NOETL_STREAM_STORAGE_RETRY_S", "8")
    refusals_before = REGISTRY.get_sample_value("noetl_storage_refusals_total") or 0.0
    async with run_services(bounded_bus, python_children=1):
        final = await submit_and_watch(bounded_bus, playbook_text=BIG_RESULT,
                                       playbook_file="big.yaml", payload={},
                                       on_event=lambda e: None, timeout_s=60)
        other = await submit_and_watch(bounded_bus, playbook_text=ONE_STEP,
                                       playbook_file="one.yaml", payload={},
                                       on_event=lambda e: None, timeout_s=20)
    assert final["event_type"] == "execution.failed", final
    error = final["steps"]["big"]["error"]
    assert error["kind"] == "storage", error
    assert "maximum bytes exceeded" in error["message"], error
    # Each refused write is counted for /metrics.
    assert (REGISTRY.get_sample_value("noetl_storage_refusals_total") or 0.0) \
        >= refusals_before + 2
    assert other["event_type"] == "execution.completed", other


async def test_the_http_api_refuses_signal_data_over_64_kib(bounded_bus: Bus) -> None:
    execution_id = new_execution_id()
    async with run_services(bounded_bus, python_children=1), \
            serve(bounded_bus, host="127.0.0.1", port=0, auth=False) as url, \
            aiohttp.ClientSession() as http:
        waiting = asyncio.create_task(submit_and_watch(
            bounded_bus, playbook_text=WAITS, playbook_file="waits.yaml", payload={},
            on_event=lambda e: None, execution_id=execution_id, timeout_s=30))
        base = f"{url}/api/executions/{execution_id}/signals"

        async def refused() -> tuple[int, dict[str, Any]]:
            async with http.post(f"{base}/go", json={"note": "x" * 70_000}) as resp:
                answer = (resp.status, await resp.json())
            # 404 until the request is applied, 409 until the listening step waits
            assert answer[0] not in (404, 409), answer
            return answer

        status, body = await assert_eventually(refused, timeout_s=15)
        async with http.post(f"{base}/go", json={"note": "small"}) as resp:
            assert resp.status == 202, await resp.text()
        final = await waiting
    assert status == 422 and "at most 65536 bytes" in body["error"]["message"], body
    assert final["event_type"] == "execution.completed", final


async def test_bounds_larger_than_the_store_are_refused_naming_the_setting(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOETL_STREAM_STORE_BYTES", "1GiB")
    load_topology.cache_clear()
    async with small_store_node(tmp_path, "64MB", name="too-small") as (_, bus):
        with pytest.raises(InfrastructureError, match="NOETL_STREAM_STORE_BYTES"):
            await provision(bus)
        load_topology.cache_clear()


async def test_every_bucket_and_object_store_has_a_byte_bound_within_the_budget(
        bounded_bus: Bus) -> None:
    topo = bounded_bus.topology
    stores = [s.name for s in topo.streams] + [f"KV_{b.name}" for b in topo.buckets] + \
        [f"OBJ_{o.name}" for o in topo.object_stores]
    bounds = {name: int((await bounded_bus.js.stream_info(name)).config.max_bytes or -1)
              for name in stores}
    unbounded = [name for name, max_bytes in bounds.items()
                 if max_bytes <= 0 and name != "NOETL_TRIGGERS"]
    assert not unbounded, bounds
    assert sum(b for b in bounds.values() if b > 0) <= BUDGET, bounds


@pytest.mark.timeout(120)
async def test_a_full_bucket_refuses_at_once_and_the_execution_waits_for_room(
        bounded_bus: Bus, monkeypatch: pytest.MonkeyPatch) -> None:
    """The executions bucket at its bound: a put is refused at once as a storage refusal (no
    hang); an execution started meanwhile waits for room and completes once there is some."""
    monkeypatch.setenv("NOETL_STREAM_STORAGE_RETRY_S", "2")
    executions = await bounded_bus.js.key_value("noetl_executions")
    written: list[str] = []
    refusals = []
    for size in (256 * 1024, 4096, 64):  # until not even a small state fits
        while True:
            key = f"filler{len(written)}"
            try:
                await asyncio.wait_for(executions.put(key, b"x" * size), 10)
            except APIError as exc:
                refusals.append(exc)
                break
            written.append(key)
    assert all(storage_refusal(exc) for exc in refusals), refusals
    assert "maximum bytes exceeded" in describe(refusals[-1]), describe(refusals[-1])
    held, bound = await _bytes(bounded_bus, "KV_noetl_executions")
    assert written and held <= bound == int(BUDGET * 0.07), (held, bound)
    async with run_services(bounded_bus, python_children=1):
        run = asyncio.create_task(submit_and_watch(
            bounded_bus, playbook_text=ONE_STEP, playbook_file="one.yaml", payload={},
            on_event=lambda e: None, timeout_s=90))
        await asyncio.sleep(4)  # past the retry bound: the request is handed back, not lost
        assert not run.done()
        for key in written:
            await executions.purge(key)
        final = await run
    assert final["event_type"] == "execution.completed", final
