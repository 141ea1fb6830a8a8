from __future__ import annotations

import dataclasses

import pytest
from nats.js.api import StreamConfig
from nats.js.errors import NotFoundError

from noetl_stream.bus.connection import Bus
from noetl_stream.bus.provision import consumer_config, provision
from noetl_stream.server.partitions import partition_of
from noetl_stream.subjects import ConsumerDecl
from noetl_stream.testing.waiting import assert_eventually

pytestmark = pytest.mark.integration


async def test_provision_twice_reports_everything_unchanged(bus: Bus) -> None:
    # The `bus` fixture provisioned once already.
    report = await provision(bus)

    assert report.created == []
    assert report.updated == []
    assert report.drift == []
    names = set(report.unchanged)
    assert {"stream NOETL_REQUESTS", "stream NOETL_COMMANDS", "stream NOETL_EVENTS"} <= names
    assert "consumer NOETL_COMMANDS/noetl-workers-default" in names
    assert "bucket noetl_executions" in names


async def test_provision_puts_a_changed_consumer_back_to_its_declaration(bus: Bus) -> None:
    decl = bus.topology.pool_consumer("default")
    await bus.js.add_consumer(decl.stream, consumer_config(dataclasses.replace(decl, ack_wait_s=2.0)))

    report = await provision(bus)

    assert report.updated == [f"consumer {decl.stream}/{decl.durable}"]
    assert report.drift == []
    info = await bus.js.consumer_info(decl.stream, decl.durable)
    assert info.config.ack_wait == decl.ack_wait_s
    assert (await provision(bus)).updated == []


async def test_provision_creates_a_consumer_per_new_pool(bus: Bus) -> None:
    report = await provision(bus, ("default", "gpu"))

    assert report.created == ["consumer NOETL_COMMANDS/noetl-workers-gpu"]


async def test_provision_upgrades_the_events_stream_for_signals_and_timers(bus: Bus) -> None:
    # An installation provisioned before listeners: no message schedules.
    stream = next(s for s in bus.topology.streams if s.name == "NOETL_EVENTS")
    await bus.js.delete_stream("NOETL_ROUTER")  # it sources the events stream
    await bus.js.delete_stream(stream.name)
    await bus.js.add_stream(StreamConfig(name=stream.name, subjects=list(stream.subjects),
                                         duplicate_window=stream.duplicate_window_s))

    report = await provision(bus)

    assert "stream NOETL_EVENTS" in report.updated
    assert report.drift == []
    assert (await bus.js.stream_info(stream.name)).config.allow_msg_schedules is True
    assert (await provision(bus)).updated == []


async def test_provision_moves_the_shared_router_consumer_to_partitions(bus: Bus) -> None:
    # The previous layout: one router consumer on the events stream, no router stream. One event
    # it acknowledged, two it had not when the servers stopped for the upgrade.
    router = bus.topology.router_decl()
    await bus.js.delete_stream(router.stream)
    legacy = ConsumerDecl(stream="NOETL_EVENTS", durable=router.legacy_durable,
                          filter_subjects=("noetl.events.*.step.done.*", "noetl.events.*.signal.>"),
                          ack_wait_s=30, max_deliver=20)
    await bus.js.add_consumer(legacy.stream, consumer_config(legacy))
    await bus.js.publish("noetl.events.applied.step.done.default", b"{}")
    await bus.js.publish("noetl.events.inflight.step.done.default", b"{}")
    await bus.js.publish("noetl.events.inflight.step.started", b"{}")  # not for the router
    await bus.js.publish("noetl.events.waiting.signal.approve", b"{}")
    sub = await bus.js.pull_subscribe_bind(legacy.durable, legacy.stream)
    [applied] = await sub.fetch(1)
    await applied.ack_sync()

    report = await provision(bus)

    assert f"stream {router.stream}" in report.created
    assert report.drift == []
    with pytest.raises(NotFoundError):
        await bus.js.consumer_info(legacy.stream, legacy.durable)
    stored: dict[str, int] = {}

    async def copied() -> None:
        stored.clear()
        info = await bus.js.stream_info(router.stream, subjects_filter=">")
        stored.update(info.state.subjects or {})
        assert {bus.topology.published_subject(s) for s in stored} == {
            "noetl.events.inflight.step.done.default", "noetl.events.waiting.signal.approve"}

    await assert_eventually(copied)
    # nats-server's partition of the execution id is the one the server computes for it.
    assert {s.split(".")[2] for s in stored} == {
        str(partition_of("inflight", router.partitions)),
        str(partition_of("waiting", router.partitions))}
    for partition in range(router.partitions):
        info = await bus.js.consumer_info(router.stream, router.durable_of(partition))
        assert info.config.filter_subject == f"noetl.router.{partition}.>"
    assert (await provision(bus)).updated == []


async def test_a_bucket_made_without_a_byte_bound_gets_it_unless_it_holds_more(bus: Bus) -> None:
    """Buckets of an earlier version had no byte bound: provisioning gives them theirs, but
    never one below what a bucket already holds (JetStream would drop entries to fit it)."""
    for name, filler in (("noetl_vars", b""), ("noetl_users", b"x" * (1024 * 1024))):
        info = await bus.js.stream_info(f"KV_{name}")
        declared = info.config.max_bytes
        assert declared is not None and declared > 0, (name, declared)
        info.config.max_bytes = -1
        await bus.js.update_stream(info.config)
        if filler:
            kv = await bus.js.key_value(name)
            for n in range(declared // len(filler) + 1):
                await kv.put(f"k{n}", filler)
    report = await provision(bus)
    assert "bucket noetl_vars" in report.updated, report
    assert (await bus.js.stream_info("KV_noetl_vars")).config.max_bytes == declared_of(
        bus, "noetl_vars")
    assert any(line.startswith("bucket noetl_users holds") for line in report.drift), report.drift
    assert (await bus.js.stream_info("KV_noetl_users")).config.max_bytes == -1


def declared_of(bus: Bus, name: str) -> int:
    return next(b.max_bytes for b in bus.topology.buckets if b.name == name)
