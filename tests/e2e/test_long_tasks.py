"""A task longer than the streams' duplicate window runs once per attempt, however often the
server is killed and its state read cold while the task runs (docs/reliability.md, "Tasks
longer than the duplicate window").

The window is 2 s and the http task 8 s; server and worker are `noetl-stream` processes on one
nats-server and the server is killed with SIGKILL while the task runs. The restarted server reads
the state cold, after the window, for a signal sent while the task still runs: its committed
outbox still holds the task's command (before the marks, the server published it again and a
worker ran the task twice).
"""

from __future__ import annotations

import asyncio
import signal
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from processes import RoleProcess

from local_http import HttpService
from noetl_stream.bus.connection import Bus, connect
from noetl_stream.bus.provision import provision
from noetl_stream.bus.signals import publish_signal
from noetl_stream.bus.watcher import ExecutionWatch
from noetl_stream.messages import ExecutionRequest, RequestReply
from noetl_stream.server.outbox_marks import mark_key
from noetl_stream.subjects import load_topology
from noetl_stream.testing.events import stored_events
from noetl_stream.testing.nats import run_nats_server
from noetl_stream.testing.waiting import assert_eventually

pytestmark = pytest.mark.e2e

WINDOW_S = 2.0
TASK_S = 8


def long_task_playbook(url: str, key: str) -> str:
    return f"""\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: long-task
workflow:
  - step: call
    tool:
      kind: http
      url: "{url}/slow"
      params: {{s: {TASK_S}, key: {key}}}
      timeout: 60
    next: after
  - step: after
    tool:
      kind: python
      input:
        slept: "{{{{ call.data.slept }}}}"
      code: |
        result = {{"slept": slept}}
"""


@pytest.fixture
async def short_window_bus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Bus]:
    """A provisioned nats-server whose streams drop duplicates for 2 s only; the processes this
    test starts inherit the setting."""
    monkeypatch.setenv("NOETL_STREAM_DUPLICATE_WINDOW", f"{WINDOW_S:g}s")
    load_topology.cache_clear()
    try:
        async with run_nats_server(tmp_path / "nats") as server:
            bus = await connect(server.url, name="long-task-test")
            try:
                await provision(bus)
                info = await bus.js.stream_info("NOETL_COMMANDS")
                assert info.config.duplicate_window == WINDOW_S
                yield bus
            finally:
                await bus.close()
    finally:
        load_topology.cache_clear()


async def submit(bus: Bus, execution_id: str, playbook: str) -> None:
    inbox = bus.nc.new_inbox()
    sub = await bus.nc.subscribe(inbox, max_msgs=1)
    request = ExecutionRequest(execution_id=execution_id, playbook=playbook,
                               playbook_file="long.yaml", reply_to=inbox)
    await bus.nc.publish("noetl.requests.execute", request.model_dump_json().encode())
    reply = RequestReply.model_validate_json((await sub.next_msg(timeout=30)).data)
    assert reply.accepted, reply.errors


async def run_killing_the_server(bus: Bus, http: HttpService, tmp_path: Path, execution_id: str,
                                 *, lose_mark: bool) -> tuple[dict[str, Any], RoleProcess]:
    """Start the long task, kill the server once its call has begun, restart it after the window
    has passed, send a signal (a cold read while the task runs), and wait for the end (returned,
    with the worker). With
    `lose_mark`, the outbox's published mark is removed while no server runs, as if the server
    had died between publishing and marking: the restarted one publishes the command again.
    """
    url = str(bus.nc.connected_url.geturl()) if bus.nc.connected_url else ""
    server, worker = RoleProcess("server", url, tmp_path), RoleProcess("worker", url, tmp_path)
    watch = ExecutionWatch(bus, execution_id)
    await watch.start()
    await server.start()
    await worker.start()
    try:
        await submit(bus, execution_id, long_task_playbook(http.url, execution_id))

        def called() -> None:
            assert http.calls[f"slow:{execution_id}"] == 1

        await assert_eventually(called, timeout_s=30, interval_s=0.05)
        await server.stop(signal.SIGKILL)
        if lose_mark:
            await (await bus.js.key_value("noetl_step_results")).delete(mark_key(execution_id))
        await asyncio.sleep(WINDOW_S + 1)  # every copy published before is out of the window
        await server.start()
        await publish_signal(bus, execution_id, "poke", {"while": "running"})
        final = await watch.wait(timeout_s=90)
        await asyncio.sleep(WINDOW_S + TASK_S / 2)  # room for a second call, were one made
    finally:
        await watch.stop()
        await server.stop()
        await worker.stop()
    return final, worker


@pytest.mark.timeout(180)
async def test_a_task_longer_than_the_window_runs_once_across_a_server_kill(
        short_window_bus: Bus, http_service: HttpService, tmp_path: Path) -> None:
    final, _ = await run_killing_the_server(short_window_bus, http_service, tmp_path, "long1",
                                            lose_mark=False)

    assert final["status"] == "completed", final.get("error")
    assert final["result"] == {"slept": TASK_S}
    assert http_service.calls["slow:long1"] == 1
    stored = await stored_events(short_window_bus.js, "long1")
    counts = Counter(e["event_type"] for e in stored if e.get("step") == "call")
    # The committed outbox went out once: no second step.started, no second delivery.
    assert counts["step.started"] == 1
    assert counts["task.started"] == 1
    assert counts["step.done"] == 1


@pytest.mark.timeout(180)
async def test_a_command_published_again_after_the_window_is_not_run_again(
        short_window_bus: Bus, http_service: HttpService, tmp_path: Path) -> None:
    final, worker = await run_killing_the_server(short_window_bus, http_service, tmp_path,
                                                 "long2", lose_mark=True)

    assert final["status"] == "completed", final.get("error")
    # The restarted server could not tell the command had gone out and published it again,
    # after the window, so the stream stored it: three commands for two steps...
    commands = await short_window_bus.js.stream_info("NOETL_COMMANDS")
    assert commands.state.last_seq == 3
    # ...and the worker took the copy and acknowledged it without running it.
    assert "acknowledged without running" in worker.log_text()
    assert http_service.calls["slow:long2"] == 1
    stored = await stored_events(short_window_bus.js, "long2")
    assert Counter(e["event_type"] for e in stored if e.get("step") == "call")["step.done"] == 1

