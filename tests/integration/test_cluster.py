"""A 3-node JetStream cluster from deploy/nats/cluster: R3 provisioning, and an execution that
finishes with every step once while the node its connection uses is killed mid-run."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from noetl_stream import config
from noetl_stream.bus.connection import Bus, connect
from noetl_stream.bus.provision import provision, provision_patiently
from noetl_stream.services import run_services, submit_and_watch
from noetl_stream.subjects import load_topology
from noetl_stream.testing.cluster import NatsCluster, run_nats_cluster

pytestmark = pytest.mark.integration

STEPS = 20


def chain_playbook(steps: int) -> str:
    """`steps` noop steps in a row, each adding one to the previous step's `n`."""
    lines = ["apiVersion: noetl.io/v2", "kind: Playbook", "metadata:", "  name: chain",
             "workflow:"]
    for i in range(1, steps + 1):
        n = "1" if i == 1 else f'"{{{{ s{i - 1}.n + 1 }}}}"'
        lines += [f"  - step: s{i}", "    tool:", "      kind: noop", f"      input: {{n: {n}}}"]
        if i < steps:
            lines.append(f"    next: s{i + 1}")
    return "\n".join(lines) + "\n"


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[NatsCluster]:
    async with run_nats_cluster(tmp_path / "cluster") as cluster:
        yield cluster


@pytest.fixture
async def cluster_bus(cluster: NatsCluster) -> AsyncIterator[Bus]:
    bus = await connect(cluster.url, name="test-cluster")
    try:
        await provision_patiently(bus, replicas=3, patience_s=30)
        yield bus
    finally:
        await bus.close()


async def test_provision_creates_streams_buckets_and_objects_at_three_replicas(
        cluster_bus: Bus) -> None:
    js = cluster_bus.js
    names = [s.name for s in cluster_bus.topology.streams]
    names += [f"KV_{b.name}" for b in cluster_bus.topology.buckets]
    names += [f"OBJ_{o.name}" for o in cluster_bus.topology.object_stores]

    replicas = {name: (await js.stream_info(name)).config.num_replicas for name in names}

    assert replicas == dict.fromkeys(names, 3)
    again = await provision(cluster_bus, replicas=3)
    assert again.created == [] and again.drift == []


async def test_provision_reports_replicas_that_differ_from_those_asked_for(
        cluster_bus: Bus) -> None:
    report = await provision(cluster_bus, replicas=1)

    # Streams are scaled down (JetStream allows it); buckets are reported, not touched.
    assert "stream NOETL_EVENTS" in report.updated
    assert "bucket noetl_executions: 3 replicas, declared 1" in report.drift
    assert (await cluster_bus.js.stream_info("NOETL_EVENTS")).config.num_replicas == 1


@pytest.fixture
def short_leases(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Leases of 3 s: what the killed node had delivered and not seen acknowledged comes back
    after that, instead of the 30 s default."""
    monkeypatch.setenv(config.ENV_COMMAND_ACK_WAIT_S, "3")
    monkeypatch.setenv(config.ENV_ROUTER_ACK_WAIT_S, "3")
    load_topology.cache_clear()
    yield
    monkeypatch.undo()
    load_topology.cache_clear()


@pytest.mark.usefixtures("short_leases")
async def test_execution_finishes_with_every_step_once_when_its_node_is_killed(
        cluster: NatsCluster, cluster_bus: Bus) -> None:
    connected = urlsplit(str(cluster_bus.nc.connected_url.geturl())).port
    victim = next(n.index for n in cluster.nodes if n.port == connected)
    runs: dict[str, set[str]] = defaultdict(set)

    def on_event(event: dict[str, Any]) -> None:
        if event.get("event_type") == "step.done":
            runs[str(event["step"])].add(str(event["step_run_id"]))
            if len(runs) == STEPS // 4 and cluster.nodes[victim].running:
                cluster.kill(victim)  # mid-run, from inside the event flow

    async with run_services(cluster_bus):
        final = await submit_and_watch(cluster_bus, playbook_text=chain_playbook(STEPS),
                                       playbook_file="chain.yaml", payload={},
                                       on_event=on_event, timeout_s=90)

    assert not cluster.nodes[victim].running
    assert final["event_type"] == "execution.completed", final
    assert final["result"] == {"n": STEPS}
    assert sorted(runs) == sorted(f"s{i}" for i in range(1, STEPS + 1))
    assert {step: len(ids) for step, ids in runs.items() if len(ids) != 1} == {}
