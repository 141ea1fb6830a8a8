"""The executions list over HTTP against a real nats-server, server and worker: labels from the
request, each row's error message, searches by id, playbook text, time range and label, counts
per status; and the rendered input an outcome event carries."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
from api_client import Api, admin_key, running_api

from noetl_stream.bus.connection import Bus
from noetl_stream.testing.waiting import assert_eventually
from playbook_files import read_playbook

pytestmark = pytest.mark.integration

HELLO = read_playbook("integration", "api_lifecycle_hello.yaml")
FAILS = read_playbook("integration", "api_list_fails.yaml")


@pytest.fixture
async def api(bus: Bus, services: None) -> AsyncIterator[Api]:
    async with running_api(bus) as api:
        api.token = await admin_key(api)
        yield api


async def ended(api: Api, execution_id: str) -> dict[str, Any]:
    async def check() -> dict[str, Any]:
        status, body = await api.call("GET", f"/api/executions/{execution_id}")
        assert status == 200 and body["status"] in ("completed", "failed"), body
        return body
    return await assert_eventually(check, timeout_s=60)


async def listed(api: Api, **params: str) -> dict[str, Any]:
    status, body = await api.call("GET", "/api/executions", params=params)
    assert status == 200, body
    return body


async def test_the_list_finds_executions_by_label_text_and_time(api: Api) -> None:
    for text in (HELLO, FAILS):
        assert (await api.call("POST", "/api/catalog", json={"content": text}))[0] == 201
    started = time.time()
    status, hello = await api.call("POST", "/api/executions", json={
        "path": "tests/api/hello", "labels": {"team": "data", "env": "dev"}})
    assert status == 202, hello
    status, fails = await api.call("POST", "/api/executions", json={
        "path": "tests/api/list-fails", "payload": {"table": "shipments"},
        "labels": {"team": "web"}})
    assert status == 202, fails
    hello_id, fails_id = hello["execution_id"], fails["execution_id"]
    await ended(api, hello_id)
    assert (await ended(api, fails_id))["status"] == "failed"

    every = await listed(api)
    rows = {i["execution_id"]: i for i in every["items"]}
    assert rows[hello_id]["labels"] == {"team": "data", "env": "dev"}
    assert rows[hello_id]["error_message"] is None
    assert "no table shipments" in rows[fails_id]["error_message"]
    assert every["counts"] == {"completed": 1, "failed": 1}

    def ids(body: dict[str, Any]) -> list[str]:
        return [i["execution_id"] for i in body["items"]]

    assert ids(await listed(api, label="team=data")) == [hello_id]
    assert ids(await listed(api, label="env")) == [hello_id]
    assert ids(await listed(api, label="team=ops")) == []
    assert ids(await listed(api, playbook="LIST-F")) == [fails_id]
    assert ids(await listed(api, execution_id=fails_id[-6:])) == [fails_id]
    # The counts leave the status filter out: they are what the other statuses would show.
    only_failed = await listed(api, status="failed")
    assert ids(only_failed) == [fails_id]
    assert only_failed["counts"] == {"completed": 1, "failed": 1}
    assert (await listed(api, label="team=web"))["counts"] == {"failed": 1}
    before = datetime.fromtimestamp(started - 60, UTC).isoformat()
    assert ids(await listed(api, until=before)) == []
    assert set(ids(await listed(api, since=before, until=datetime.now(UTC).isoformat()))) == {
        hello_id, fails_id}

    # The failed step's outcome says what its task was called with, rendered.
    status, events = await api.call("GET", f"/api/executions/{fails_id}/events",
                                    params={"limit": "100"})
    assert status == 200
    failed = [e["event"] for e in events["items"] if e["event_type"] == "step.failed"]
    assert failed and failed[0]["input"]["start_task"]["input"] == {"table": "shipments"}
    assert failed[0]["input"]["start_task"]["kind"] == "python"


async def test_labels_that_break_the_rules_are_refused(api: Api) -> None:
    assert (await api.call("POST", "/api/catalog", json={"content": HELLO}))[0] == 201
    for labels in ({"has space": "x"}, {"team": ""}, {f"k{n}": "v" for n in range(33)}):
        status, body = await api.call("POST", "/api/executions",
                                      json={"path": "tests/api/hello", "labels": labels})
        assert status == 422, (labels, body)
    assert (await listed(api))["items"] == []
