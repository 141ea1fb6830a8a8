"""Webhook and event triggers, catch-up after downtime and backfill, against real processes:
nats-server, `noetl-stream server` (serving the HTTP API) and `noetl-stream worker`.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from cli import CLI, run_cli
from processes import RoleProcess
from test_triggers import EXAMPLES, at, cli, completed, started

from noetl_stream import ids, jsonutil
from noetl_stream.bus.connection import Bus, connect
from noetl_stream.bus.nats_server import NatsServer
from noetl_stream.bus.provision import provision
from noetl_stream.testing.events import stored_messages
from noetl_stream.testing.waiting import assert_eventually
from noetl_stream.triggers.signature import sign

pytestmark = pytest.mark.e2e

SECRET = "a-webhook-secret"
FAILING = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: flaky, path: etl/flaky}
workflow:
  - step: start
    tool:
      kind: python
      code: |
        raise RuntimeError("the source table is locked")
"""


async def apply_event_trigger(url: str, tmp_path: Path) -> None:
    doc = tmp_path / "late.yaml"
    doc.write_text("apiVersion: noetl.io/v2\nkind: Trigger\nmetadata: {name: late}\nspec:\n"
                   "  playbook: examples/triggers/report\n"
                   "  payload: {order: '{{ event.execution_id }}', source: 'late: {{ event.reason }}'}\n"
                   "  on: {event: sla.missed, playbook: 'etl/*'}\n")
    await cli(url, "apply", str(doc))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class HttpServer(RoleProcess):
    """The server process, also serving the HTTP API on `port`."""

    def __init__(self, url: str, logs: Path, port: int) -> None:
        super().__init__("server", url, logs)
        self.port = port

    async def start(self) -> None:
        self.starts += 1
        with (self.logs / f"server-{self.starts}.log").open("wb") as log:
            self.proc = await asyncio.create_subprocess_exec(
                str(CLI), "server", "--nats-url", self.url,
                "--http", f"127.0.0.1:{self.port}", stdin=asyncio.subprocess.DEVNULL,
                stdout=log, stderr=log)


@pytest.fixture
async def api_stack(nats_server: NatsServer, tmp_path: Path) -> AsyncIterator[tuple[Bus, str]]:
    bus = await connect(nats_server.url, name="trigger-test")
    await provision(bus)
    port = free_port()
    services = [HttpServer(nats_server.url, tmp_path, port),
                RoleProcess("worker", nats_server.url, tmp_path)]
    for service in services:
        await service.start()
    out = await run_cli("register", str(EXAMPLES / "report.yaml"), "--nats-url", nats_server.url)
    assert out.returncode == 0, out.stderr
    base = f"http://127.0.0.1:{port}"

    async def listening() -> None:
        try:
            async with aiohttp.ClientSession() as http, http.get(f"{base}/health") as r:
                assert r.status == 200
        except aiohttp.ClientConnectionError as exc:
            raise AssertionError("not listening yet") from exc

    await assert_eventually(listening, timeout_s=60, interval_s=0.3)
    try:
        yield bus, base
    finally:
        for service in services:
            await service.stop()
        await bus.close()


async def post_hook(base: str, name: str, body: bytes, signature: str | None,
                    delivery: str | None = None) -> tuple[int, dict[str, Any]]:
    headers = {"Content-Type": "application/json"}
    if signature is not None:
        headers["X-Noetl-Signature"] = signature
    if delivery is not None:
        headers["X-Noetl-Delivery"] = delivery
    async with aiohttp.ClientSession() as http, http.post(
            f"{base}/api/hooks/{name}", data=body, headers=headers) as response:
        return response.status, await response.json()


@pytest.mark.timeout(120)
async def test_a_signed_webhook_starts_one_execution_a_bad_signature_none(
        nats_server: NatsServer, api_stack: tuple[Bus, str]) -> None:
    bus, base = api_stack
    url = nats_server.url
    out = await run_cli("credential", "set", "hook-secret", "--kind", "generic", "--data",
                        json.dumps({"secret": SECRET}), "--nats-url", url)
    assert out.returncode == 0, out.stderr
    await cli(url, "apply", str(EXAMPLES / "order_hook.yaml"))
    body = json.dumps({"id": "W-1", "total": 40}).encode()

    status, answer = await post_hook(base, "order_hook", body, sign("wrong", body))
    assert status == 401 and answer["error"]["code"] == "bad_signature"
    status, _ = await post_hook(base, "order_hook", body, None)
    assert status == 401
    status, _ = await post_hook(base, "order_hook", body + b" ", sign(SECRET, body))
    assert status == 401
    status, _ = await post_hook(base, "no_such_hook", body, sign(SECRET, body))
    assert status == 404

    status, first = await post_hook(base, "order_hook", body, sign(SECRET, body), "d-17")
    assert status == 202, first
    assert first["execution_id"] == ids.derived_execution_id("trigger-webhook", "order_hook",
                                                             "d-17")
    # The same delivery again (a sender's retry): the same execution, not a second one.
    status, again = await post_hook(base, "order_hook", body, sign(SECRET, body), "d-17")
    assert status == 202 and again["execution_id"] == first["execution_id"]
    # Without a delivery id, a replay of the identical body is the same delivery too.
    status, plain = await post_hook(base, "order_hook", body, sign(SECRET, body))
    status2, replay = await post_hook(base, "order_hook", body, sign(SECRET, body))
    assert (status, status2) == (202, 202) and plain["execution_id"] == replay["execution_id"]
    assert plain["execution_id"] != first["execution_id"]

    async def both_done() -> None:
        assert {first["execution_id"], plain["execution_id"]} <= await completed(bus)

    await assert_eventually(both_done, timeout_s=30, interval_s=0.3)
    await asyncio.sleep(1)
    starts = await started(bus)
    hook_starts = {k: v for k, v in starts.items() if v[0]["workload"]["source"].startswith(
        "webhook")}
    assert sorted(hook_starts) == sorted({first["execution_id"], plain["execution_id"]})
    (start,) = hook_starts[first["execution_id"]]
    assert start["workload"]["order"] == "W-1"
    assert start["workload"]["source"] == "webhook d-17"
    assert start["workload"]["total"] == 40  # the body is the payload, templates over it

    await cli(url, "pause", "order_hook")
    status, _ = await post_hook(base, "order_hook", body, sign(SECRET, body), "d-18")
    assert status == 409


SUBSCRIPTION = """apiVersion: noetl.io/v1
kind: Subscription
metadata: {name: webhook_orders, path: subscriptions/webhook_orders}
spec:
  source: webhook
  mode: push
  ingress:
    gateway_path: /ingress/orders
    verify: {type: hmac_sha256, header: X-Signature, secret: hook-secret}
  dispatch: {playbook: examples/triggers/report}
"""


@pytest.mark.timeout(120)
async def test_a_noetl_push_subscription_applies_as_a_webhook_with_its_own_header(
        nats_server: NatsServer, api_stack: tuple[Bus, str], tmp_path: Path) -> None:
    bus, base = api_stack
    url = nats_server.url
    out = await run_cli("credential", "set", "hook-secret", "--kind", "generic", "--data",
                        json.dumps({"secret": SECRET}), "--nats-url", url)
    assert out.returncode == 0, out.stderr
    doc = tmp_path / "sub.yaml"
    doc.write_text(SUBSCRIPTION)
    applied = await run_cli("trigger", "apply", str(doc), "--nats-url", url)
    assert applied.returncode == 0, applied.stderr
    assert "deliveries go to POST /api/hooks/orders" in applied.stderr
    assert applied.stdout.startswith("trigger orders created (active): webhook")
    body = json.dumps({"id": "S-1", "source": "subscription"}).encode()
    headers = {"Content-Type": "application/json", "X-Noetl-Signature": sign(SECRET, body)}
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{base}/api/hooks/orders", data=body, headers=headers) as r:
            assert r.status == 401  # the subscription's header is X-Signature
        headers = {"Content-Type": "application/json",
                   "X-Signature": sign(SECRET, body).removeprefix("sha256=")}
        async with http.post(f"{base}/api/hooks/orders", data=body, headers=headers) as r:
            assert r.status == 202
            execution_id = (await r.json())["execution_id"]

    async def done() -> None:
        assert execution_id in await completed(bus)

    await assert_eventually(done, timeout_s=30, interval_s=0.3)
    (start,) = (await started(bus))[execution_id]
    assert (start["workload"]["id"], start["workload"]["source"]) == ("S-1", "subscription")
    refused = tmp_path / "pull.yaml"
    refused.write_text(SUBSCRIPTION.replace("source: webhook", "source: kafka"))
    out = await run_cli("trigger", "apply", str(refused), "--nats-url", url)
    assert out.returncode == 2 and "kafka has no connector here" in out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.timeout(150)
async def test_an_event_trigger_starts_once_per_failed_execution_of_matching_playbooks(
        nats_server: NatsServer, api_stack: tuple[Bus, str], tmp_path: Path) -> None:
    bus, _ = api_stack
    url = nats_server.url
    failing = tmp_path / "flaky.yaml"
    failing.write_text(FAILING)
    other = tmp_path / "other.yaml"
    other.write_text(FAILING.replace("etl/flaky", "adhoc/flaky").replace("name: flaky",
                                                                          "name: other"))
    for doc in (failing, other):
        out = await run_cli("register", str(doc), "--nats-url", url)
        assert out.returncode == 0, out.stderr
    await cli(url, "apply", str(EXAMPLES / "on_failure.yaml"))

    runs = []
    for path in ("etl/flaky", "adhoc/flaky", "etl/flaky"):
        out = await run_cli("run", path, "--nats-url", url, "--json", timeout_s=90)
        assert out.summary["status"] == "failed", out.stdout + out.stderr
        runs.append((path, out.summary["execution_id"]))
    etl_runs = [eid for path, eid in runs if path.startswith("etl/")]

    async def notified() -> dict[str, list[dict[str, Any]]]:
        starts = {k: v for k, v in (await started(bus)).items()
                  if "failed:" in str(v[0]["workload"].get("source"))}
        assert len(starts) >= 2
        return starts

    starts = await assert_eventually(notified, timeout_s=60, interval_s=0.5)
    await asyncio.sleep(2)  # nothing more comes: one execution per failure, none for adhoc/
    starts = await notified()
    assert sorted(v[0]["workload"]["order"] for v in starts.values()) == sorted(etl_runs)
    # Any event type the runtime publishes under an execution: one start per event, however
    # often the event is delivered or published again.
    await apply_event_trigger(url, tmp_path)
    sla = {"event_id": "sla-1", "event_type": "sla.missed", "execution_id": etl_runs[0],
           "timestamp": 0, "time": "2026-11-26T00:00:00Z", "reason": "ran past 5m"}
    for copy in ("a", "b"):
        await bus.js.publish(f"noetl.events.{etl_runs[0]}.sla.missed", json.dumps(sla).encode(),
                             headers={"Nats-Msg-Id": f"sla-test-{copy}"})

    async def late_started() -> list[str]:
        late = [k for k, v in (await started(bus)).items()
                if v[0]["workload"].get("source") == "late: ran past 5m"]
        assert late
        return late

    late = await assert_eventually(late_started, timeout_s=60, interval_s=0.5)
    await asyncio.sleep(2)
    assert late == await late_started()
    assert late == [ids.derived_execution_id("trigger-event", "late", "sla-1")]
    for failed_id in etl_runs:
        events = await stored_messages(bus.js, f"noetl.events.{failed_id}.execution.failed")
        (event_id,) = [jsonutil.loads(d)["event_id"] for _, d in events]
        (start,) = starts[ids.derived_execution_id("trigger-event", "on_failure", event_id)]
        source = start["workload"]["source"]
        assert source.startswith("etl/flaky failed: ") and "the source table is locked" in source


async def api_key(url: str, role: str) -> str:
    user = f"u-{role}"
    proc = await asyncio.create_subprocess_exec(
        str(CLI), "user", "add", user, "--role", role, "--password-stdin", "--nats-url", url,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    _, err = await proc.communicate(b"a-long-password\n")
    assert proc.returncode == 0, err
    made = await run_cli("apikey", "create", "--user", user, "--role", role, "--nats-url", url)
    assert made.returncode == 0, made.stderr
    return made.stdout.strip()


@pytest.mark.timeout(150)
async def test_the_http_api_operates_triggers_under_the_roles(
        nats_server: NatsServer, api_stack: tuple[Bus, str]) -> None:
    _, base = api_stack
    url = nats_server.url
    viewer, operator = await api_key(url, "viewer"), await api_key(url, "operator")
    as_viewer = {"Authorization": f"Bearer {viewer}"}
    as_operator = {"Authorization": f"Bearer {operator}"}
    nightly = (EXAMPLES / "nightly.yaml").read_bytes()
    async with aiohttp.ClientSession() as http:
        async def call(method: str, path: str, headers: dict[str, str], **kw: Any
                       ) -> tuple[int, Any]:
            async with http.request(method, base + path, headers=headers, **kw) as r:
                return r.status, await r.json()

        yaml = {**as_operator, "Content-Type": "text/yaml"}
        assert (await call("POST", "/api/triggers", {**as_viewer, "Content-Type": "text/yaml"},
                           data=nightly))[0] == 403
        status, made = await call("POST", "/api/triggers", yaml, data=nightly)
        assert (status, made["name"], made["result"]) == (201, "nightly", "created")
        status, listed = await call("GET", "/api/triggers", as_viewer)
        assert status == 200
        assert [(t["name"], t["state"], t["source"]) for t in listed["items"]] == [
            ("nightly", "active", "cron 0 2 * * * (Europe/Amsterdam)")]
        status, one = await call("GET", "/api/triggers/nightly", as_viewer)
        assert status == 200 and len(one["next_fires"]) == 5
        assert one["next_fires"][0] == listed["items"][0]["next_fire"]
        assert all(at(a) < at(b) for a, b in zip(one["next_fires"], one["next_fires"][1:],
                                                   strict=False))

        assert (await call("POST", "/api/triggers/nightly/pause", as_viewer))[0] == 403
        status, paused = await call("POST", "/api/triggers/nightly/pause", as_operator)
        assert (status, paused["result"]) == (200, "paused")
        status, one = await call("GET", "/api/triggers/nightly", as_viewer)
        assert (one["state"], one["next_fires"], one["next_fire"]) == ("paused", [], None)
        # The answer waits for the outcome: the execution a server started for the fire.
        status, fired_now = await call("POST", "/api/triggers/nightly/fire", as_operator)
        assert (status, fired_now["result"]) == (201, "started"), fired_now
        assert len(fired_now["nominal_times"]) == 1
        started_id = fired_now["execution_id"]
        status, started = await call("GET", f"/api/executions/{started_id}", as_viewer)
        assert status == 200 and started["execution_id"] == started_id
        status, filled = await call("POST", "/api/triggers/nightly/backfill", as_operator,
                                    json={"from": "2026-11-01T00:00:00Z",
                                          "to": "2026-11-02T23:00:00Z"})
        assert (status, filled["nominal_times"]) == (202, ["2026-11-01T01:00:00.000Z",
                                                           "2026-11-02T01:00:00.000Z"])
        assert (await call("POST", "/api/triggers/nightly/resume", as_operator))[1][
            "result"] == "resumed"

        async def last_completed() -> dict[str, Any]:
            _, rows = await call("GET", "/api/triggers", as_viewer)
            last = rows["items"][0]["last_execution"]
            assert last is not None and last["status"] == "completed"
            return dict(last)

        await assert_eventually(last_completed, timeout_s=60, interval_s=0.5)

        async def all_three_fired() -> list[dict[str, Any]]:
            _, page = await call("GET", "/api/triggers/nightly/history", as_viewer)
            assert sum(e["event_type"] == "trigger.fired" for e in page["items"]) == 3
            return list(page["items"])

        events = await assert_eventually(all_three_fired, timeout_s=60, interval_s=0.5)
        changes = [e["event_type"].removeprefix("trigger.") for e in events
                   if e["event_type"] != "trigger.fired"]
        assert changes == ["applied", "paused", "fire_requested", "backfill_requested",
                           "resumed"]
        assert [e["seq"] for e in events] == sorted(e["seq"] for e in events)
        _, rest = await call("GET", f"/api/triggers/nightly/history?after_seq="
                             f"{events[1]['seq']}&limit=2", as_viewer)
        assert [e["seq"] for e in rest["items"]] == [e["seq"] for e in events[2:4]]
        _, last = await call("GET", "/api/triggers/nightly/history?newest=true&limit=3",
                             as_viewer)
        assert [e["seq"] for e in last["items"]] == [e["seq"] for e in events[-3:]]

        status, gone = await call("DELETE", "/api/triggers/nightly", as_operator)
        assert (status, gone["result"]) == (200, "deleted")
        assert (await call("GET", "/api/triggers/nightly", as_viewer))[0] == 404
        assert (await call("POST", "/api/triggers/nightly/fire", as_operator))[0] == 404
        assert (await call("POST", "/api/triggers/nightly/fire?wait=61", as_operator))[0] == 422

        # A subject trigger fired by hand has no message for its payload: nothing starts, and
        # the answer says why instead of accepting the fire.
        big_orders = (EXAMPLES / "big_orders.yaml").read_bytes()
        assert (await call("POST", "/api/triggers", yaml, data=big_orders))[0] == 201
        status, refused = await call("POST", "/api/triggers/big_orders/fire", as_operator)
        assert (status, refused["error"]["code"]) == (409, "not_started"), refused
        assert refused["error"]["message"].startswith("trigger big_orders fired for ")
        assert "but no execution started: " in refused["error"]["message"]
        assert "message" in refused["error"]["details"]["reason"]
        status, unwaited = await call("POST", "/api/triggers/big_orders/fire?wait=0", as_operator)
        assert (status, unwaited["result"]) == (202, "fired") and unwaited["execution_id"]
        assert (await call("POST", "/api/triggers", yaml, data=b"apiVersion: noetl.io/v2\n"
                           b"kind: Trigger\nmetadata: {name: x}\nspec: {playbook: a}\n"))[0] == 422
