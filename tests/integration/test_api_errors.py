"""Every error of the HTTP API has one JSON shape with the right 4xx, and never a traceback."""

from __future__ import annotations

import io
import logging
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from api_client import Api, admin_key, running_api

from noetl_stream import jsonutil
from noetl_stream.bus.connection import Bus
from noetl_stream.messages import ExecutionRequest
from noetl_stream.testing.waiting import assert_eventually
from playbook_files import read_playbook

pytestmark = pytest.mark.integration

BROKEN = read_playbook("integration", "api_errors_broken.yaml")


@pytest.fixture
async def api(bus: Bus) -> AsyncIterator[Api]:
    async with running_api(bus) as api:
        api.token = await admin_key(api)
        yield api


def assert_error_shape(body: object, code: str) -> None:
    assert isinstance(body, dict) and set(body) == {"error"}
    assert set(body["error"]) == {"code", "message", "details"}
    assert body["error"]["code"] == code
    assert "Traceback" not in jsonutil.dumps_str(body)


async def test_api_bad_playbook_is_422_with_every_issue_and_its_line(api: Api) -> None:
    status, body = await api.call("POST", "/api/catalog", data=BROKEN,
                                  headers={"Content-Type": "text/yaml"})
    assert status == 422
    assert_error_shape(body, "invalid_playbook")
    issues = body["error"]["details"]
    assert len(issues) >= 2  # the unknown kind and the arc to a missing step, both at once
    by_field = {i["field"]: i for i in issues}
    kind = next(i for f, i in by_field.items() if f and "kind" in f)
    assert kind["line"] == 9 and kind["step"] == "start" and "postgres" in kind["message"]
    assert kind["text"].startswith("<request>:9: ")
    assert any(i["line"] == 10 and "nowhere" in i["message"] for i in issues)

    status, body = await api.call("POST", "/api/catalog", json={"content": "steps: [unclosed"})
    assert status == 422 and body["error"]["details"][0]["line"]

    status, body = await api.call("POST", "/api/executions", json={"playbook": BROKEN})
    assert status == 422
    assert_error_shape(body, "invalid_playbook")


async def test_api_oversized_body_is_413(api: Api) -> None:
    big = jsonutil.dumps({"content": "x" * (2 * 1024 * 1024)})
    status, body = await api.call("POST", "/api/catalog", data=io.BytesIO(big),
                                  headers={"Content-Type": "application/json"})
    assert status == 413
    assert_error_shape(body, "payload_too_large")


async def test_api_unknown_things_are_404(api: Api) -> None:
    for method, path in [("GET", "/api/executions/nope"),
                         ("GET", "/api/executions/nope/events"),
                         ("GET", "/api/executions/nope/events/stream"),
                         ("POST", "/api/executions/nope/cancel"),
                         ("POST", "/api/executions/nope/signals/go"),
                         ("GET", "/api/executions/bad.id"),
                         ("GET", "/api/vars/nope"),
                         ("GET", "/api/vars/nope/x"),
                         ("GET", "/api/catalog/no/such/path"),
                         ("DELETE", "/api/catalog/no/such/path"),
                         ("GET", "/api/credentials/nothing"),
                         ("DELETE", "/api/sessions/current"),
                         ("GET", "/api/no-such-route")]:
        status, body = await api.call(method, path)
        assert status == 404, (method, path, body)
        assert_error_shape(body, "not_found")
    status, body = await api.call("POST", "/api/executions", json={"path": "not/registered"})
    assert status == 404
    status, body = await api.call("PATCH", "/api/catalog")
    assert status == 405
    assert_error_shape(body, "method_not_allowed")


async def test_api_malformed_requests_are_422_naming_the_field(api: Api) -> None:
    status, body = await api.call("POST", "/api/executions", data=b"{not json",
                                  headers={"Content-Type": "application/json"})
    assert status == 422
    assert_error_shape(body, "invalid")
    status, body = await api.call("POST", "/api/executions",
                                  json={"path": "a", "playbook": "b", "surprise": 1})
    assert status == 422
    locs = [d["loc"] for d in body["error"]["details"]]
    assert ["surprise"] in locs
    status, body = await api.call("GET", "/api/executions", params={"limit": "0"})
    assert status == 422 and body["error"]["details"][0]["loc"] == ["limit"]
    status, body = await api.call("GET", "/api/executions", params={"cursor": "garbage"})
    assert status == 422
    # A rejected credential names the field, never the value sent.
    status, body = await api.call("POST", "/api/credentials", json={
        "name": "c", "kind": "bearer", "data": {"token": "s3cr3t-value", "extra": "s3cr3t-value"}})
    assert status == 422 and "s3cr3t-value" not in jsonutil.dumps_str(body)


async def test_api_unexpected_failure_is_a_generic_500_and_logged(
        bus: Bus, caplog: pytest.LogCaptureFixture) -> None:
    from noetl_stream.api import create_app

    app = await create_app(bus, auth=None)

    async def explode(request: web.Request) -> web.StreamResponse:
        raise RuntimeError("secret internals: password=hunter2")

    app.router.add_get("/explode", explode)
    from aiohttp.test_utils import TestServer

    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        import aiohttp

        async with aiohttp.ClientSession() as http, http.get(server.make_url("/explode")) as resp:
            assert resp.status == 500
            body = await resp.json()
    finally:
        await server.close()
    assert_error_shape(body, "internal")
    assert "hunter2" not in jsonutil.dumps_str(body)
    logged = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert logged and logged[0].exc_info is not None


async def test_api_reports_a_request_the_server_refused_as_rejected(api: Api, bus: Bus,
                                                                    services: None) -> None:
    # A client that skips validation publishes a broken playbook straight to the request stream.
    request = ExecutionRequest(execution_id="refused1", playbook=BROKEN, playbook_file="b.yaml")
    await bus.js.publish(bus.topology.execute_request_subject(), request.model_dump_json().encode(),
                         headers={"Nats-Msg-Id": "req:refused1"})

    async def rejected() -> dict[str, object]:
        status, body = await api.call("GET", "/api/executions/refused1")
        assert status == 200 and body["status"] == "rejected", body
        return body  # type: ignore[no-any-return]

    body = await assert_eventually(rejected)
    assert any("postgress" in e for e in body["errors"])  # type: ignore[attr-defined]
    status, error = await api.call("POST", "/api/executions/refused1/cancel")
    assert status == 409 and error["error"]["details"] == {"status": "rejected"}
    status, page = await api.call("GET", "/api/executions/refused1/events")
    assert status == 200 and [i["event_type"] for i in page["items"]] == ["execution.rejected"]


async def test_api_record_a_newer_release_stored_is_409_newer_format(api: Api, bus: Bus) -> None:
    record = {"schema_version": 99, "name": "later", "kind": "postgres", "tags": [],
              "created_at": "2026-11-26T12:00:00Z", "updated_at": "2026-11-26T12:00:00Z",
              "data": "sealed", "added_later": True}
    await (await bus.js.key_value("noetl_credentials")).put("later", jsonutil.dumps(record))
    status, body = await api.call("GET", "/api/credentials/later")
    assert status == 409
    assert_error_shape(body, "newer_format")
    assert body["error"]["message"] == ("credential has schema version 99; this release reads "
                                        "versions up to 2: it is left as it is for a release "
                                        "that reads it")
