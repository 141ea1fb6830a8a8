"""Following an execution's events through consumers we name: from a start sequence, in order,
once, and on through the loss of the consumer (a nats-server restart, a cluster node killed)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from nats.errors import Error as NatsError

from noetl_stream import jsonutil
from noetl_stream.bus.connection import Bus, connect
from noetl_stream.bus.event_feed import EVENTS_STREAM, EventFeed
from noetl_stream.bus.nats_server import start_nats_server
from noetl_stream.bus.provision import provision, provision_patiently
from noetl_stream.bus.watcher import ExecutionWatch
from noetl_stream.testing.cluster import run_nats_cluster
from noetl_stream.testing.waiting import assert_eventually

pytestmark = pytest.mark.integration

# Short heartbeats so a lost consumer is noticed within a couple of seconds.
HEARTBEAT = timedelta(seconds=0.5)


async def _publish(bus: Bus, execution_id: str, event_type: str, n: int) -> int:
    """Store one event, retrying through leader elections; its stream sequence."""
    subject = bus.topology.event_subject(execution_id, event_type)
    body = jsonutil.dumps({"event_type": event_type, "execution_id": execution_id, "n": n})

    async def once() -> int:
        try:
            # The same Nats-Msg-Id on a retry: a publish that was stored but not acked stays one.
            ack = await bus.js.publish(subject, body, headers={"Nats-Msg-Id": f"{execution_id}:{n}"},
                                       timeout=2)
        except (NatsError, TimeoutError) as exc:
            raise AssertionError(f"publish of event {n} not acked yet: {exc!r}") from exc
        return int(ack.seq)

    return await assert_eventually(once, timeout_s=60, interval_s=0.1)


class Seen:
    """What a watch delivered, in delivery order."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def __call__(self, event: dict[str, Any]) -> None:
        self.events.append(event)

    @property
    def numbers(self) -> list[int]:
        return [int(e["n"]) for e in self.events]

    def has(self, count: int) -> None:
        assert len(self.events) >= count, self.numbers


async def test_event_feed_reads_after_a_sequence_in_order_through_a_named_consumer(bus: Bus) -> None:
    seqs = [await _publish(bus, "ex1", "step.done", n) for n in range(5)]
    await _publish(bus, "other", "step.done", 99)

    async with EventFeed(bus.nc, bus.topology.execution_events_filter("ex1"),
                         after_seq=seqs[1]) as feed:
        info = await bus.js.consumer_info(EVENTS_STREAM, feed.consumer_name)
        first = [await feed.get() for _ in range(3)]
        await _publish(bus, "ex1", "step.done", 5)
        live = await feed.get()

    assert feed.consumer_name is not None and feed.consumer_name.startswith("watch_")
    assert info.config.filter_subject == "noetl.events.ex1.>" and info.config.durable_name is None
    assert [jsonutil.loads(m.data)["n"] for m in [*first, live]] == [2, 3, 4, 5]
    assert feed.last_seq == int(live.metadata.sequence.stream) and feed.renewals == 0


async def test_watch_sees_every_event_once_across_a_nats_server_restart(tmp_path: Path) -> None:
    server = await start_nats_server(tmp_path / "nats", record=False)
    bus = await connect(server.url, name="test-watch-restart")
    seen = Seen()
    watch = ExecutionWatch(bus, "ex1", seen, idle_heartbeat=HEARTBEAT)
    try:
        await provision(bus)
        await watch.start()
        for n in range(3):
            await _publish(bus, "ex1", "step.done", n)
        await assert_eventually(lambda: seen.has(3))
        lost = watch.feed.consumer_name

        assert server.process is not None
        server.process.kill()
        server.process.wait()
        server = await start_nats_server(tmp_path / "nats", port=server.port, record=False)
        for n in range(3, 8):
            await _publish(bus, "ex1", "step.done", n)
        await _publish(bus, "ex1", "execution.completed", 8)
        final = await watch.wait(60)
    finally:
        await watch.stop()
        await bus.close()
        await server.stop()

    assert final["event_type"] == "execution.completed"
    assert seen.numbers == list(range(9))
    assert watch.feed.renewals >= 1 and watch.feed.consumer_name != lost


async def test_watch_sees_every_event_once_after_the_node_holding_its_consumer_is_killed(
        tmp_path: Path) -> None:
    async with run_nats_cluster(tmp_path / "cluster") as cluster:
        bus = await connect(cluster.url, name="test-watch-cluster")
        seen = Seen()
        watch = ExecutionWatch(bus, "ex1", seen, idle_heartbeat=HEARTBEAT)
        try:
            await provision_patiently(bus, replicas=3, patience_s=30)
            await watch.start()
            for n in range(3):
                await _publish(bus, "ex1", "step.done", n)
            await assert_eventually(lambda: seen.has(3))
            lost = watch.feed.consumer_name
            info = await bus.js.consumer_info(EVENTS_STREAM, lost)
            holder = next(node.index for node in cluster.nodes if node.name == info.cluster.leader)

            cluster.kill(holder)
            for n in range(3, 13):
                await _publish(bus, "ex1", "step.done", n)
            await _publish(bus, "ex1", "execution.completed", 13)
            final = await watch.wait(60)
        finally:
            await watch.stop()
            await bus.close()

    assert final["event_type"] == "execution.completed"
    assert seen.numbers == list(range(14))
    assert watch.feed.renewals >= 1 and watch.feed.consumer_name != lost

