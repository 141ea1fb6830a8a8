"""The whole life of a playbook over HTTP only, with authentication on, against a real nats-server,
server and worker: log in, register, execute, follow the events as SSE, read status and vars,
page through events, resume a stream, run idempotently, cancel a long run, log out."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any

import pytest
from api_client import Api, running_api

from noetl_stream import jsonutil
from noetl_stream.bus.connection import Bus
from noetl_stream.testing.waiting import assert_eventually
from playbook_files import read_playbook

pytestmark = pytest.mark.integration

HELLO = read_playbook("integration", "api_lifecycle_hello.yaml")

SLEEPER = read_playbook("integration", "api_lifecycle_sleeper.yaml")


@pytest.fixture
async def api(bus: Bus, services: None) -> AsyncIterator[Api]:
    async with running_api(bus) as api:
        yield api


async def sse_events(api: Api, execution_id: str, *, last_event_id: str | None = None
                     ) -> list[dict[str, Any]]:
    """Every frame of the execution's SSE stream until the server ends it."""
    headers = {"Authorization": f"Bearer {api.token}"}
    if last_event_id is not None:
        headers["Last-Event-ID"] = last_event_id
    frames: list[dict[str, Any]] = []
    current: dict[str, Any] = {}
    async with api.http.get(f"{api.url}/api/executions/{execution_id}/events/stream",
                            headers=headers) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        async for raw in resp.content:
            line = raw.decode().rstrip("\n")
            if not line:
                if current:
                    frames.append(current)
                current = {}
            elif line.startswith("id: "):
                current["id"] = int(line[4:])
            elif line.startswith("event: "):
                current["event"] = line[7:]
            elif line.startswith("data: "):
                current["data"] = jsonutil.loads(line[6:])
    return frames


async def test_api_runs_a_playbook_from_login_to_logout(api: Api) -> None:
    await api.auth.users.add("alice", ["admin"], "correct horse battery")  # type: ignore[union-attr]
    status, login = await api.call("POST", "/api/sessions",
                                   json={"user": "alice", "password": "correct horse battery"})
    assert status == 201, login
    assert login["user"] == "alice" and login["roles"] == ["admin"]
    api.token = login["token"]

    status, registered = await api.call("POST", "/api/catalog", json={"content": HELLO})
    assert status == 201, registered
    assert registered["path"] == "tests/api/hello" and registered["version"] == "1.0"
    status, catalog = await api.call("GET", "/api/catalog")
    assert status == 200
    assert {"path": "tests/api/hello", "latest": registered["playbook_id"],
            "versions": {"1.0": registered["playbook_id"]}} in catalog["items"]
    status, text = await api.call("GET", "/api/catalog/tests/api/hello", params={"version": "1.0"})
    assert status == 200 and text["content"] == HELLO and text["name"] == "api-hello"

    status, started = await api.call("POST", "/api/executions",
                                     json={"path": "tests/api/hello", "payload": {"name": "API"}})
    assert status == 202, started
    assert started["status"] == "accepted"
    execution_id = started["execution_id"]

    frames = await sse_events(api, execution_id)
    assert frames[-1]["event"] == "execution.completed"
    assert frames[-1]["data"]["result"] == "HELLO, API"
    ids = [f["id"] for f in frames]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert {"step.done", "execution.started"} <= {f["event"] for f in frames}

    status, detail = await api.call("GET", f"/api/executions/{execution_id}")
    assert status == 200
    assert detail["status"] == "completed" and detail["result"] == "HELLO, API"
    assert detail["playbook_path"] == "tests/api/hello" and detail["started_at"]
    assert detail["steps"]["shout"]["status"] == "completed"
    assert detail["vars"] == {"greeting": "Hello, API"}

    async def metrics_show_the_run() -> None:
        status, text = await api.call("GET", "/metrics")
        assert status == 200
        assert 'noetl_executions{status="completed"} 1' in text
        # the in-process worker's own series (prometheus_client's default registry)
        assert re.search(r'noetl_step_duration_seconds_count\{kind="python",playbook='
                         r'"tests/api/hello",pool="default",status="ok"\} [1-9]', text)
        assert 'noetl_consumer_pending_messages{consumer="noetl-server-router-0",stream="NOETL_ROUTER"}' \
            in text
        # the in-process worker's heartbeat
        assert 'noetl_processes{pool="default",role="worker"} 1.0' in text
        assert 'noetl_worker_running_commands{pool="default",worker="' in text

    await assert_eventually(metrics_show_the_run)
    status, document = await api.call("GET", "/api/openapi.json")
    assert status == 200 and document["openapi"] == "3.1.0"

    status, all_vars = await api.call("GET", f"/api/vars/{execution_id}")
    assert (status, all_vars["vars"]) == (200, {"greeting": "Hello, API"})
    status, one = await api.call("GET", f"/api/vars/{execution_id}/greeting")
    assert (status, one["value"]) == (200, "Hello, API")
    status, _ = await api.call("PUT", f"/api/vars/{execution_id}/note", json={"value": [1, 2]})
    assert status == 200
    assert (await api.call("GET", f"/api/vars/{execution_id}/note"))[1]["value"] == [1, 2]
    assert (await api.call("DELETE", f"/api/vars/{execution_id}/note"))[0] == 200
    assert (await api.call("GET", f"/api/vars/{execution_id}/note"))[0] == 404

    # Pages of events follow the stream's sequence, and together are what SSE delivered.
    seen: list[int] = []
    after = 0
    while True:
        status, page = await api.call("GET", f"/api/executions/{execution_id}/events",
                                      params={"after_seq": str(after), "limit": "3"})
        assert status == 200
        if not page["items"]:
            break
        seen += [item["seq"] for item in page["items"]]
        after = page["next_after_seq"]
    assert seen == ids

    # Resuming with Last-Event-ID sends only what came after it, up to the end.
    resumed = await sse_events(api, execution_id, last_event_id=str(ids[2]))
    assert [f["id"] for f in resumed] == ids[3:]
    assert await sse_events(api, execution_id, last_event_id=str(ids[-1])) == []

    status, listed = await api.call("GET", "/api/executions",
                                    params={"status": "completed", "path": "tests/api/hello"})
    assert status == 200
    assert [i["execution_id"] for i in listed["items"]] == [execution_id]

    # The same Idempotency-Key starts one execution, however often it is sent.
    key = {"Idempotency-Key": "nightly-2024-05-01"}
    first = await api.call("POST", "/api/executions", json={"playbook_id": registered["playbook_id"]},
                           headers=key)
    again = await api.call("POST", "/api/executions", json={"playbook_id": registered["playbook_id"]},
                           headers=key)
    assert first[0] == again[0] == 202
    assert first[1]["execution_id"] == again[1]["execution_id"]
    # Numeric like a fresh id, though derived from the key (and so not time-ordered).
    assert 0 < int(first[1]["execution_id"]) < 2**63

    status, long_run = await api.call("POST", "/api/executions", json={"playbook": SLEEPER})
    assert status == 202 and long_run["status"] == "accepted"
    long_id = long_run["execution_id"]
    # Fresh ids of one server are time-ordered: the later start has the larger id.
    assert int(execution_id) < int(long_id) < 2**63
    status, cancelled = await api.call("POST", f"/api/executions/{long_id}/cancel",
                                       json={"reason": "test over"})
    assert status == 202, cancelled

    async def ended_cancelled() -> None:
        status, body = await api.call("GET", f"/api/executions/{long_id}")
        assert (status, body["status"]) == (200, "cancelled")

    await assert_eventually(ended_cancelled, timeout_s=30)
    status, again_cancel = await api.call("POST", f"/api/executions/{long_id}/cancel")
    assert status == 409 and again_cancel["error"]["details"] == {"status": "cancelled"}

    status, sessions = await api.call("GET", "/api/sessions")
    assert status == 200 and [s["session_id"] for s in sessions["items"]] == [login["session_id"]]
    assert (await api.call("DELETE", "/api/sessions/current"))[0] == 200
    status, body = await api.call("GET", "/api/catalog")
    assert status == 401 and body["error"]["code"] == "unauthorized"
