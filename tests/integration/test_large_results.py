"""Reference-first results on a real nats-server: a large result goes to the object store
`noetl_results`, events and state carry a reference, later steps and `run --json` see the value."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from noetl_stream import jsonutil, refs
from noetl_stream.bus.connection import Bus
from noetl_stream.services import submit_and_watch
from noetl_stream.state.results import ResultStore
from noetl_stream.testing.events import stored_events
from noetl_stream.tools.base import TaskCall, ToolServices
from noetl_stream.tools.http import HttpTool
from playbook_files import read_playbook

pytestmark = pytest.mark.integration

CLI = Path(sys.executable).with_name("noetl-stream")
ROWS = 50_000  # ~5 MB of JSON

BIG_PLAYBOOK = read_playbook("integration", "large_results_big.yaml", rows=ROWS)


async def test_five_megabyte_result_travels_by_reference_and_is_read_by_a_later_step(
        bus: Bus, services: None) -> None:
    final = await submit_and_watch(bus, playbook_text=BIG_PLAYBOOK, playbook_file="big.yaml",
                                   payload={}, on_event=lambda _e: None, timeout_s=120)

    assert final["status"] == "completed", final.get("error")
    assert final["result"]["count"] == ROWS and final["result"]["last"] == ROWS - 1
    inner = refs.ref_of(final["steps"]["start"]["result"])
    assert inner is not None and inner["size"] > 5_000_000
    assert inner["checksum"] == f"sha256:{inner['key']}"
    value = await ResultStore(bus.js).resolve(final["steps"]["start"]["result"])
    assert len(value) == ROWS and value[7] == {"i": 7, "pad": "x" * 90}
    # Every event and the router's state hold the reference, never the rows.
    events = await stored_events(bus.js, final["execution_id"])
    assert max(len(jsonutil.dumps(e)) for e in events) < refs.DEFAULT_MAX_PAYLOAD_BYTES
    state = await (await bus.js.key_value("noetl_executions")).get(final["execution_id"])
    assert len(state.value or b"") < refs.DEFAULT_MAX_PAYLOAD_BYTES


async def test_playbook_payload_limit_and_ctx_values_are_externalized(
        bus: Bus, services: None) -> None:
    playbook = read_playbook("integration", "large_results_limit.yaml")

    final = await submit_and_watch(bus, playbook_text=playbook, playbook_file="limit.yaml",
                                   payload={}, on_event=lambda _e: None, timeout_s=60)

    assert final["status"] == "completed", final.get("error")
    assert final["result"] == 10_000
    assert refs.ref_of(final["steps"]["start"]["result"]) is not None
    assert refs.ref_of(final["ctx"]["copy"]) is not None
    assert final["ctx"]["tiny"] == 1


async def test_run_json_prints_the_value_of_a_referenced_result(tmp_path: Path) -> None:
    path = tmp_path / "big.yaml"
    path.write_text(BIG_PLAYBOOK)
    proc = await asyncio.create_subprocess_exec(
        str(CLI), "run", str(path), "--json", "--quiet", stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, stdin=asyncio.subprocess.DEVNULL, env=dict(os.environ))
    out, err = await asyncio.wait_for(proc.communicate(), 180)

    assert proc.returncode == 0, err.decode()[-2000:]
    try:
        summary: dict[str, Any] = json.loads(out)
    except ValueError as exc:
        raise AssertionError(f"stdout is not one JSON document ({exc}); {len(out)} bytes, starts "
                             f"{out[:300]!r}, ends {out[-300:]!r}; stderr {err[-800:]!r}") from None
    rows = summary["steps"]["start"]["result"]
    assert isinstance(rows, list) and len(rows) == ROWS and rows[-1]["i"] == ROWS - 1
    assert summary["result"]["count"] == ROWS


PNG_BYTES = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 64


@pytest.fixture
async def binary_url() -> AsyncIterator[str]:
    async def image(request: web.Request) -> web.Response:
        return web.Response(body=PNG_BYTES, content_type="image/png")

    app = web.Application()
    app.router.add_get("/image", image)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield str(server.make_url("/image"))
    finally:
        await server.close()


async def test_http_binary_body_is_stored_as_a_reference(bus: Bus, binary_url: str) -> None:
    store = ResultStore(bus.js)
    tool = HttpTool(ToolServices(results=store))
    try:
        outcome = await tool.run(TaskCall(
            execution_id="e1", step="s", task="t", kind="http",
            config={"url": binary_url, "response_type": "binary"}, input={}, spec={},
            idempotency_key="k"))
    finally:
        await tool.close()

    assert outcome.ok, outcome.error
    inner = refs.ref_of(outcome.result)
    assert inner is not None
    assert inner["encoding"] == "binary" and inner["content_type"] == "image/png"
    assert inner["size"] == len(PNG_BYTES)
    assert inner["key"] == hashlib.sha256(PNG_BYTES).hexdigest()
    # A binary reference is not JSON: readers leave it as it is.
    assert await store.resolve({"body": outcome.result}) == {"body": outcome.result}
    fresh = ResultStore(bus.js)
    assert await fresh.fetch(inner) == PNG_BYTES
