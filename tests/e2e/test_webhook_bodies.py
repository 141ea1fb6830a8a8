"""Webhook bodies that are not JSON, against nats-server, `server --http` and a worker as
separate processes: a signed form or text body starts one execution (a signature authenticates
the body, whatever its type); unsigned, nothing; and every other state-changing route still
refuses what a page of another site could send.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from cli import run_cli
from test_trigger_hooks_events import SECRET, api_stack
from test_triggers import EXAMPLES, cli, completed, started

from noetl_stream.bus.connection import Bus
from noetl_stream.bus.nats_server import NatsServer
from noetl_stream.testing.waiting import assert_eventually
from noetl_stream.triggers.signature import sign

pytestmark = pytest.mark.e2e
__all__ = ["api_stack"]  # the fixture, used by name

TEXT_HOOK = """apiVersion: noetl.io/v2
kind: Trigger
metadata: {name: text_hook}
spec:
  playbook: examples/triggers/report
  payload: {order: "{{ webhook.body }}", source: "text {{ webhook.headers['Content-Type'] }}"}
  webhook: {secret: hook-secret}
"""


async def post(base: str, path: str, body: bytes, headers: dict[str, str]
               ) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as http, http.post(
            f"{base}{path}", data=body, headers=headers) as response:
        return response.status, await response.json()


@pytest.mark.timeout(120)
async def test_a_signed_form_or_text_webhook_starts_one_and_other_routes_still_refuse_them(
        nats_server: NatsServer, api_stack: tuple[Bus, str], tmp_path: Path) -> None:
    bus, base = api_stack
    url = nats_server.url
    out = await run_cli("credential", "set", "hook-secret", "--kind", "generic", "--data",
                        json.dumps({"secret": SECRET}), "--nats-url", url)
    assert out.returncode == 0, out.stderr
    await cli(url, "apply", str(EXAMPLES / "order_hook.yaml"))
    (tmp_path / "text_hook.yaml").write_text(TEXT_HOOK)
    await cli(url, "apply", str(tmp_path / "text_hook.yaml"))
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    body = b"id=F-1&total=12&tag=a&tag=b"

    status, answer = await post(base, "/api/hooks/order_hook", body, form)
    assert (status, answer["error"]["code"]) == (401, "bad_signature")
    status, by_form = await post(base, "/api/hooks/order_hook", body,
                                 {**form, "X-Noetl-Signature": sign(SECRET, body)})
    assert status == 202, by_form
    text = b"ping from the shop"
    status, by_text = await post(base, "/api/hooks/text_hook", text, {
        "Content-Type": "text/plain; charset=utf-8", "X-Noetl-Signature": sign(SECRET, text)})
    assert status == 202, by_text

    async def done() -> None:
        assert {by_form["execution_id"], by_text["execution_id"]} <= await completed(bus)

    await assert_eventually(done, timeout_s=30, interval_s=0.3)
    starts = await started(bus)
    assert len(starts[by_form["execution_id"]]) == 1
    workload = starts[by_form["execution_id"]][0]["workload"]
    # the form's fields are the payload, as a JSON body's keys are; a repeated one is a list
    assert (workload["order"], workload["total"], workload["tag"]) == ("F-1", "12", ["a", "b"])
    (start,) = starts[by_text["execution_id"]]
    assert (start["workload"]["order"], start["workload"]["source"]) == (
        "ping from the shop", "text text/plain; charset=utf-8")

    # Any other state-changing route keeps the guard: text from another site's page is refused,
    # and so is text without an Origin.
    request = json.dumps({"path": "examples/triggers/report"}).encode()
    status, answer = await post(base, "/api/executions", request, {
        "Content-Type": "text/plain", "Origin": "http://elsewhere.example"})
    assert (status, answer["error"]["code"]) == (403, "cross_origin")
    status, answer = await post(base, "/api/executions", request, {"Content-Type": "text/plain"})
    assert (status, answer["error"]["code"]) == (415, "unsupported_media_type")
    status, answer = await post(base, "/api/triggers/order_hook/fire", b"x=1", form)
    assert (status, answer["error"]["code"]) == (415, "unsupported_media_type")
