"""`POST /api/executions/{id}/restart` against a real nats-server, server and worker: a failed
five-step execution restarted with the workload value that fixes its fourth step completes
without calling steps 1-3 again; an unknown execution is a 404, a completed one without a step
to restart from a 409."""

from __future__ import annotations

from typing import Any

import pytest
from api_client import Api, admin_key, running_api

from local_http import HttpService
from noetl_stream.bus.connection import Bus
from noetl_stream.server.verify import verify
from noetl_stream.services import run_services
from noetl_stream.testing.waiting import assert_eventually
from playbook_files import read_playbook

pytestmark = pytest.mark.integration

STEPS = ("one", "two", "three", "four", "five")


def calls(service: HttpService) -> dict[str, int]:
    return {key: service.calls[key] for key in STEPS}


async def _ended(api: Api, execution_id: str, runs_of_four: int) -> dict[str, Any]:
    async def ended() -> dict[str, Any]:
        status, body = await api.call("GET", f"/api/executions/{execution_id}")
        assert status == 200, body
        assert body["status"] != "running"
        assert body["steps"]["four"]["runs"] == runs_of_four
        return dict(body)
    return await assert_eventually(ended, timeout_s=30)


async def test_the_http_api_restarts_a_failed_execution_with_a_new_workload_value(
        bus: Bus, http_service: HttpService) -> None:
    text = read_playbook("integration", "restart_chain.yaml", api_url=http_service.url)
    async with run_services(bus, python_children=1), running_api(bus) as api:
        api.token = await admin_key(api)
        status, started = await api.call("POST", "/api/executions", json={"playbook": text})
        assert status == 202, started
        execution_id = started["execution_id"]
        failed = await _ended(api, execution_id, 1)
        assert failed["status"] == "failed"

        status, refused = await api.call("POST", "/api/executions/4242/restart", json={})
        assert status == 404, refused
        status, asked = await api.call("POST", f"/api/executions/{execution_id}/restart",
                                       json={"workload": {"status": 200}})
        assert status == 202, asked
        assert asked == {"execution_id": execution_id, "restart": 1,
                         "status": "restart_requested"}
        done = await _ended(api, execution_id, 2)
        assert done["status"] == "completed", done.get("error")
        assert calls(http_service) == {"one": 1, "two": 1, "three": 1, "four": 2, "five": 1}

        status, refused = await api.call("POST", f"/api/executions/{execution_id}/restart")
        assert status == 409, refused
        assert "only a failed or cancelled execution restarts" in str(refused)


async def _napping(api: Api, execution_id: str, run: int) -> None:
    async def napping() -> None:
        status, body = await api.call("GET", f"/api/executions/{execution_id}")
        assert status == 200, body
        assert body["steps"].get("nap", {}).get("status") == "running"
        assert body["steps"]["nap"]["runs"] == run
    await assert_eventually(napping, timeout_s=30)


async def _status(api: Api, execution_id: str, want: str) -> dict[str, Any]:
    async def reached() -> dict[str, Any]:
        status, body = await api.call("GET", f"/api/executions/{execution_id}")
        assert status == 200 and body["status"] == want, (body["steps"], body.get("error"))
        return dict(body)
    return await assert_eventually(reached, timeout_s=30)


async def test_a_cancelled_execution_restarts_and_can_be_cancelled_again(bus: Bus) -> None:
    text = read_playbook("integration", "restart_nap.yaml")
    async with run_services(bus, python_children=2), running_api(bus) as api:
        api.token = await admin_key(api)
        status, started = await api.call("POST", "/api/executions", json={"playbook": text})
        assert status == 202, started
        execution_id = started["execution_id"]
        await _napping(api, execution_id, 1)
        status, _ = await api.call("POST", f"/api/executions/{execution_id}/cancel", json={})
        assert status == 202
        await _status(api, execution_id, "cancelled")

        # Restarted as it was: the cancelled step naps again, and a second cancel is heard.
        status, asked = await api.call("POST", f"/api/executions/{execution_id}/restart")
        assert status == 202, asked
        await _napping(api, execution_id, 2)
        status, _ = await api.call("POST", f"/api/executions/{execution_id}/cancel", json={})
        assert status == 202
        cancelled = await _status(api, execution_id, "cancelled")
        assert cancelled["steps"]["start"]["runs"] == 1

        status, asked = await api.call("POST", f"/api/executions/{execution_id}/restart",
                                       json={"workload": {"nap": 0}})
        assert status == 202 and asked["restart"] == 2, asked
        done = await _status(api, execution_id, "completed")
        assert done["result"] == 0
        assert done["steps"]["nap"]["runs"] == 3 and done["steps"]["start"]["runs"] == 1

    verdict = await verify(bus, execution_id)
    assert verdict.outcome == "equal", verdict.detail
