"""NoETL's ways of writing an http task's body and inline auth, against a real local server."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from local_http import HttpService
from noetl_stream.bus.connection import Bus
from noetl_stream.services import submit_and_watch
from noetl_stream.state.credentials import CredentialStore
from noetl_stream.state.crypto import SecretBox
from noetl_stream.tools.base import TaskCall
from noetl_stream.tools.http import HttpTool

pytestmark = pytest.mark.integration


def call(**config: Any) -> TaskCall:
    return TaskCall(execution_id="e1", step="s", task="t", kind="http", config=config, input={},
                    spec={}, idempotency_key="e1.s.1:None:t:1")


@pytest.mark.parametrize("field", ["body", "data", "payload"])
async def test_a_mapping_body_under_any_of_noetls_names_is_sent_as_json(
        http_tool: HttpTool, http_service: HttpService, field: str) -> None:
    outcome = await http_tool.run(call(url=f"{http_service.url}/echo", method="POST",
                                       **{field: {"ids": [1, 2]}}))

    assert outcome.ok, outcome.error
    assert outcome.result["json"] == {"ids": [1, 2]}
    assert outcome.result["headers"]["Content-Type"] == "application/json"


@pytest.mark.parametrize(("auth", "header", "value"), [
    ({"type": "bearer", "token": "t-1"}, "Authorization", "Bearer t-1"),
    ({"type": "basic", "username": "u", "password": "p"}, "Authorization",
     "Basic " + base64.b64encode(b"u:p").decode()),
    ({"type": "api_key", "token": "k-1", "header": "X-Key"}, "X-Key", "k-1"),
    ({"type": "api_key", "token": "k-2"}, "X-API-Key", "k-2"),
    ({"type": "api_key", "key": "X-Token", "value": "k-3"}, "X-Token", "k-3"),
    ({"type": "basic", "user": "u", "password": "p"}, "Authorization",
     "Basic " + base64.b64encode(b"u:p").decode()),
    ({"type": "header", "X-Tenant": "acme"}, "X-Tenant", "acme"),
], ids=["bearer-token", "basic", "api_key-token-header", "api_key-default-header",
        "api_key-key-value", "basic-user", "header"])
async def test_inline_auth_of_noetls_auth_config_presents_the_header(
        http_tool: HttpTool, http_service: HttpService, auth: dict[str, str], header: str,
        value: str) -> None:
    outcome = await http_tool.run(call(url=f"{http_service.url}/echo", auth=auth))

    assert outcome.ok, outcome.error
    assert outcome.result["headers"][header] == value


async def test_auth_type_none_sends_no_credentials(http_tool: HttpTool,
                                                   http_service: HttpService) -> None:
    outcome = await http_tool.run(call(url=f"{http_service.url}/echo", auth={"type": "none"}))

    assert outcome.ok, outcome.error
    assert "Authorization" not in outcome.result["headers"]


AUTH_MAP_PLAYBOOK = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: auth_map}
workload: {url: ""}
workflow:
  - step: start
    tool:
      kind: http
      url: "{{ workload.url }}"
      auth:
        api: {type: bearer, key: api_token}
"""


async def test_an_auth_map_of_noetls_python_engine_presents_the_credential_its_key_names(
        bus: Bus, services: None, noetl_home: Path, http_service: HttpService) -> None:
    await (await CredentialStore.open(bus.js, SecretBox.from_env(noetl_home))).set(
        "api_token", "bearer", {"token": "map-token-1"})

    final = await submit_and_watch(bus, playbook_text=AUTH_MAP_PLAYBOOK,
                                   playbook_file="auth_map.yaml",
                                   payload={"url": f"{http_service.url}/echo"},
                                   on_event=lambda _e: None, timeout_s=30)

    assert final["status"] == "completed", final.get("error")
    assert http_service.echoed[-1]["Authorization"] == "Bearer map-token-1"
