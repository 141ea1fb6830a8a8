from __future__ import annotations

import dataclasses

import pytest
from nats.js.api import StreamConfig

from noetl_stream.runtime.connection import Bus
from noetl_stream.runtime.provision import consumer_config, provision

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


async def test_provision_upgrades_the_events_stream_and_router_for_signals_and_timers(bus: Bus) -> None:
    # An installation provisioned before listeners: no message schedules, outcome filters only.
    stream = next(s for s in bus.topology.streams if s.name == "NOETL_EVENTS")
    router = bus.topology.consumer("noetl-server-router")
    old_filters = tuple(f for f in router.filter_subjects if ".signal." not in f and "timer" not in f)
    await bus.js.delete_stream(stream.name)
    await bus.js.add_stream(StreamConfig(name=stream.name, subjects=list(stream.subjects),
                                         duplicate_window=stream.duplicate_window_s))
    await bus.js.add_consumer(router.stream, consumer_config(
        dataclasses.replace(router, filter_subjects=old_filters)))

    report = await provision(bus)

    assert "stream NOETL_EVENTS" in report.updated
    assert f"consumer {router.stream}/{router.durable}" in report.updated
    assert report.drift == []
    assert (await bus.js.stream_info(stream.name)).config.allow_msg_schedules is True
    info = await bus.js.consumer_info(router.stream, router.durable)
    assert {"noetl.events.*.signal.>", "noetl.events.*.timer.fired"} <= set(
        info.config.filter_subjects or ())
    assert (await provision(bus)).updated == []
