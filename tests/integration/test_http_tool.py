"""The http tool against a real local HTTP server."""

from __future__ import annotations

from typing import Any

import pytest
from plain_client import PlainClient

from local_http import HttpService
from noetl_stream.bus.nats_server import free_port
from noetl_stream.tools.base import TaskCall
from noetl_stream.tools.http import HttpTool
from playbook_files import read_playbook

pytestmark = pytest.mark.integration


def call(**config: Any) -> TaskCall:
    return TaskCall(execution_id="e1", step="s", task="t", kind="http", config=config, input={},
                    spec={}, idempotency_key="e1.s.1:None:t:1")


async def test_2xx_reply_body_is_the_result(http_tool: HttpTool, http_service: HttpService) -> None:
    outcome = await http_tool.run(call(url=f"{http_service.url}/echo", method="post",
                                       params={"q": "x", "flag": True},
                                       headers={"Idempotency-Key": "k-1"}, json={"a": [1, 2]}))

    assert outcome.ok
    assert outcome.http is not None and outcome.http["status"] == 200
    body = outcome.result
    assert body["method"] == "POST"
    assert body["query"] == {"q": "x", "flag": "true"}
    assert body["json"] == {"a": [1, 2]}
    assert body["headers"]["Idempotency-Key"] == "k-1"


async def test_header_values_that_are_not_text_are_sent_as_noetl_spells_them(
        http_tool: HttpTool, http_service: HttpService) -> None:
    # NoETL's http tool writes a boolean as true/false, a number as itself, null not at all.
    outcome = await http_tool.run(call(url=f"{http_service.url}/echo", headers={
        "X-Flag": True, "X-Off": False, "X-Page": 2, "X-Rate": 1.5, "X-Gone": None,
        "X-Tags": ["a", 1]}))

    assert outcome.ok
    sent = outcome.result["headers"]
    assert (sent["X-Flag"], sent["X-Off"], sent["X-Page"], sent["X-Rate"]) == (
        "true", "false", "2", "1.5")
    assert sent["X-Tags"] == '["a",1]' and "X-Gone" not in sent


async def test_503_is_a_retryable_error_with_its_status(http_tool: HttpTool,
                                                        http_service: HttpService) -> None:
    outcome = await http_tool.run(call(url=f"{http_service.url}/flaky/a", params={"fail": 1}))

    assert not outcome.ok
    assert outcome.error is not None
    assert outcome.error["status"] == 503
    assert outcome.error["retryable"] is True
    assert outcome.error["kind"] == "server_error"
    assert outcome.error["body"] == {"error": "unavailable", "calls": 1}
    assert "503" in outcome.error["message"]

    again = await http_tool.run(call(url=f"{http_service.url}/flaky/a", params={"fail": 1}))
    assert again.ok and again.result == {"key": "a", "calls": 2}


async def test_404_is_an_error_that_is_not_retryable(http_tool: HttpTool,
                                                     http_service: HttpService) -> None:
    outcome = await http_tool.run(call(url=f"{http_service.url}/missing"))

    assert outcome.error is not None
    assert outcome.error["status"] == 404
    assert outcome.error["retryable"] is False


async def test_connection_refused_is_a_retryable_connection_error(http_tool: HttpTool) -> None:
    url = f"http://127.0.0.1:{free_port()}/nothing"

    outcome = await http_tool.run(call(url=url))

    assert not outcome.ok
    assert outcome.error is not None
    assert outcome.error["kind"] == "connection"
    assert outcome.error["retryable"] is True
    assert url in outcome.error["message"]


@pytest.mark.usefixtures("services")
async def test_http_step_sends_the_headers_the_playbook_renders(client: PlainClient,
                                                                http_service: HttpService) -> None:
    playbook = read_playbook("integration", "http_tool_ledger.yaml", url=http_service.url)
    feed = await client.run("ledger1", playbook)

    assert feed.final["status"] == "completed"
    assert feed.final["result"] == {"recorded": 1}
    assert http_service.ledger == [{"key": "ledger1:charge", "body": {"amount": 5}}]
