"""An execution request repeated after the duplicate window (a client that retried, a request
stored twice) finds the execution it started and publishes nothing its start already published:
a step that is running is not run a second time. Real server and worker, a one-second window."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from local_http import HttpService
from noetl_stream import ids
from noetl_stream.bus.connection import Bus, connect
from noetl_stream.bus.provision import provision
from noetl_stream.bus.watcher import ExecutionWatch
from noetl_stream.messages import ExecutionRequest
from noetl_stream.services import run_services
from noetl_stream.subjects import load_topology
from noetl_stream.testing.nats import run_nats_server
from noetl_stream.testing.waiting import assert_eventually

PLAYBOOK = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: repeated
workflow:
  - step: call
    tool:
      kind: http
      url: "{url}/slow"
      params: {{s: 3, key: repeated}}
"""


@pytest.fixture
async def one_second_window(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Bus]:
    monkeypatch.setenv("NOETL_STREAM_DUPLICATE_WINDOW", "1s")
    load_topology.cache_clear()
    try:
        async with run_nats_server(tmp_path / "nats") as server:
            bus = await connect(server.url, name="repeat-test")
            try:
                await provision(bus)
                yield bus
            finally:
                await bus.close()
    finally:
        load_topology.cache_clear()


async def test_a_request_repeated_after_the_window_runs_nothing_twice(
        one_second_window: Bus, http_service: HttpService) -> None:
    bus = one_second_window
    body = ExecutionRequest(execution_id="rep1", playbook=PLAYBOOK.format(url=http_service.url),
                            playbook_file="repeated.yaml").model_dump_json().encode()

    async def send() -> None:
        ack = await bus.js.publish("noetl.requests.execute", body,
                                   headers={"Nats-Msg-Id": ids.request_msg_id("rep1", body)})
        assert not ack.duplicate  # stored: the window is past

    watch = ExecutionWatch(bus, "rep1")
    await watch.start()
    try:
        async with run_services(bus, python_children=1):
            await send()

            def called() -> None:
                assert http_service.calls["slow:repeated"] == 1

            await assert_eventually(called, timeout_s=20)
            await asyncio.sleep(1.5)
            await send()
            final = await watch.wait(30)
            await asyncio.sleep(2)  # room for a second call, were the command published again
    finally:
        await watch.stop()
    assert final["status"] == "completed", final.get("error")
    assert http_service.calls["slow:repeated"] == 1
    assert (await bus.js.stream_info("NOETL_COMMANDS")).state.last_seq == 1
