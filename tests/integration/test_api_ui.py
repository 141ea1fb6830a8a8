"""The UI's routes on a real API with a real server and worker: the pages and assets answer
without a token and carry a strict content policy, the net and explain routes answer from the
execution's state, and a finished execution's list item says when it ended."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from datetime import datetime

import pytest
from api_client import Api, admin_key, running_api

from noetl_stream.api.ui.routes import asset_names
from noetl_stream.bus.connection import Bus
from noetl_stream.testing.waiting import assert_eventually
from playbook_files import read_playbook

pytestmark = pytest.mark.integration

BRANCHES = read_playbook("integration", "api_ui_branches.yaml")


@pytest.fixture
async def api(bus: Bus, services: None) -> AsyncIterator[Api]:
    async with running_api(bus) as api:
        api.token = await admin_key(api)
        yield api


@pytest.mark.parametrize("path", ["/", "/executions/123", "/catalog", "/login"])
async def test_pages_answer_html_without_a_token(api: Api, path: str) -> None:
    async with api.http.get(api.url + path) as resp:  # no Authorization header
        assert resp.status == 200
        assert resp.content_type == "text/html"
        policy = resp.headers["Content-Security-Policy"]
        assert "script-src 'self'" in policy and "connect-src 'self'" in policy
        page = await resp.text()
    for asset in re.findall(r'(?:src|href)="/ui/([^"]+)"', page):
        async with api.http.get(f"{api.url}/ui/{asset}") as resp:
            assert resp.status == 200, asset
    assert "<script>" not in page and "https://" not in page


async def test_assets_are_only_what_ships_and_fetch_nothing_elsewhere(api: Api) -> None:
    for name in sorted(asset_names()):
        async with api.http.get(f"{api.url}/ui/{name}") as resp:
            text = await resp.text()
        # The only absolute URL allowed is the SVG namespace, which is a name, not a fetch.
        assert not re.findall(r"https?://(?!www\.w3\.org/2000/svg)", text), name
    async with api.http.get(f"{api.url}/ui/..%2Fnet.py") as resp:
        assert resp.status == 404
    async with api.http.get(f"{api.url}/ui/nothing.js") as resp:
        assert resp.status == 404


async def test_net_and_explain_answer_from_the_execution(api: Api) -> None:
    status, started = await api.call("POST", "/api/executions", json={"playbook": BRANCHES})
    assert status == 202, started
    execution_id = started["execution_id"]

    async def finished() -> dict[str, object]:
        code, detail = await api.call("GET", f"/api/executions/{execution_id}")
        assert code == 200 and detail["status"] == "completed", detail
        return detail

    await assert_eventually(finished, timeout_s=30, interval_s=0.1)
    status, net = await api.call("GET", f"/api/executions/{execution_id}/net")
    assert status == 200, net
    nodes = {n["name"]: n for n in net["nodes"]}
    assert set(nodes) == {"start", "left", "right", "both"}
    assert nodes["both"]["join"] and not nodes["left"]["join"]
    assert nodes["both"]["x"] > nodes["left"]["x"] > nodes["start"]["x"]
    guards = {(e["source"], e["target"]): e["when"] for e in net["edges"]}
    assert guards == {("start", "left"): None, ("start", "right"): None,
                      ("left", "both"): None, ("right", "both"): "{{ right == 2 }}"}

    status, report = await api.call("GET", f"/api/executions/{execution_id}/explain")
    assert status == 200
    assert report["status"] == "completed" and report["result"] == 3
    assert report["steps"] == {"start": "completed", "left": "completed", "right": "completed",
                               "both": "completed"}

    status, page = await api.call("GET", "/api/executions")
    item = next(i for i in page["items"] if i["execution_id"] == execution_id)
    assert item["ended_at"] is not None
    assert datetime.fromisoformat(item["ended_at"]) >= datetime.fromisoformat(item["started_at"])

    for route in ("net", "explain"):
        status, body = await api.call("GET", f"/api/executions/424242/{route}")
        assert status == 404, body
        status, body = await api.call("GET", f"/api/executions/{execution_id}/{route}", token="nsk_x")
        assert status == 401



async def test_a_registered_playbook_is_drawn_before_it_runs(api: Api) -> None:
    status, registered = await api.call("POST", "/api/catalog", json={"content": BRANCHES})
    assert status == 201, registered
    status, net = await api.call("GET", f"/api/playbooks/{registered['playbook_id']}/net")
    assert status == 200, net
    assert net["path"] == "tests/ui/branches"
    assert [n["name"] for n in net["nodes"]] == ["start", "left", "right", "both"]
    for missing in ("pb_" + "0" * 32, "not-a-key"):
        status, body = await api.call("GET", f"/api/playbooks/{missing}/net")
        assert status == 404, body
