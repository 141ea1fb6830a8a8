"""An event trigger (`on: {event: ...}`) across `noetl-stream server` killed -9, against
nats-server, the server and a worker as separate processes: each event starts exactly one
execution, whether it came while a server ran, while none did, or just before the server died
(the event then comes back after the ack wait), and an event published twice is still one.
"""

from __future__ import annotations

import asyncio
import json
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from cli import run_cli
from processes import RoleProcess
from test_triggers import EXAMPLES, cli, completed, fired, started

from noetl_stream import ids
from noetl_stream.bus.connection import Bus
from noetl_stream.bus.nats_server import NatsServer
from noetl_stream.testing.waiting import assert_eventually

pytestmark = pytest.mark.e2e

ACK_WAIT_S = 3
TRIGGER = """apiVersion: noetl.io/v2
kind: Trigger
metadata: {name: overdue}
spec:
  playbook: examples/triggers/report
  payload: {order: "{{ event.execution_id }}", source: "overdue: {{ event.reason }}"}
  on: {event: sla.missed}
"""



async def publish_sla_missed(bus: Bus, n: int, copy: str = "") -> str:
    """The `sla.missed` event of a made-up execution; its event id."""
    execution_id = str(900_000_000_000_000_000 + n)
    event = {"event_id": f"sla-{n}", "event_type": "sla.missed", "execution_id": execution_id,
             "timestamp": 0, "time": "2026-11-26T00:00:00Z", "reason": f"late {n}"}
    await bus.js.publish(f"noetl.events.{execution_id}.sla.missed", json.dumps(event).encode(),
                         headers={"Nats-Msg-Id": f"sla-crash-{n}{copy}"})
    return f"sla-{n}"


async def overdue_starts(bus: Bus) -> dict[str, list[dict[str, Any]]]:
    return {k: v for k, v in (await started(bus)).items()
            if str(v[0]["workload"].get("source", "")).startswith("overdue: ")}


@pytest.mark.timeout(150)
async def test_each_event_starts_one_execution_across_a_server_killed_9(
        nats_server: NatsServer, bus: Bus, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    url = nats_server.url
    monkeypatch.setenv("NOETL_STREAM_ROUTER_ACK_WAIT_S", str(ACK_WAIT_S))
    server, worker = RoleProcess("server", url, tmp_path), RoleProcess("worker", url, tmp_path)
    await server.start()
    await worker.start()
    try:
        out = await run_cli("register", str(EXAMPLES / "report.yaml"), "--nats-url", url)
        assert out.returncode == 0, out.stderr
        (tmp_path / "overdue.yaml").write_text(TRIGGER)
        await cli(url, "apply", str(tmp_path / "overdue.yaml"))
        events = [await publish_sla_missed(bus, 1)]

        async def count(n: int) -> dict[str, list[dict[str, Any]]]:
            starts = await overdue_starts(bus)
            assert len(starts) >= n, starts
            return starts

        await assert_eventually(lambda: count(1), timeout_s=30, interval_s=0.3)
        await server.stop(signal.SIGKILL)
        # While no server runs: one event, and the same event published again under another
        # message id (a client's retry past the stream's duplicate window).
        events.append(await publish_sla_missed(bus, 2))
        await publish_sla_missed(bus, 2, copy="-again")
        await server.start()
        await assert_eventually(lambda: count(2), timeout_s=60, interval_s=0.3)
        # The server dies as the next events arrive, at moments where it may have published a
        # start and not acknowledged the event: it comes back after the ack wait to the next.
        for n, delay_s in ((3, 0.0), (4, 0.05), (5, 0.2)):
            events.append(await publish_sla_missed(bus, n))
            await asyncio.sleep(delay_s)
            await server.stop(signal.SIGKILL)
            await server.start()
            await asyncio.sleep(1)
        starts = await assert_eventually(lambda: count(5), timeout_s=60, interval_s=0.5)

        wanted = {ids.derived_execution_id("trigger-event", "overdue", e) for e in events}
        assert set(starts) == wanted

        async def all_completed() -> None:
            assert wanted <= await completed(bus)

        await assert_eventually(all_completed, timeout_s=60, interval_s=0.5)
        await asyncio.sleep(ACK_WAIT_S + 1)  # a redelivery would show now as a second start
        starts = await overdue_starts(bus)
        assert set(starts) == wanted
        assert all(len(v) == 1 for v in starts.values()), starts
        assert sorted(v[0]["workload"]["source"] for v in starts.values()) == [
            f"overdue: late {n}" for n in range(1, 6)]
        fires = Counter(f["execution_id"] for f in await fired(bus, "overdue"))
        assert set(fires) == wanted and set(fires.values()) == {1}, fires
    finally:
        await worker.stop()
        await server.stop()
