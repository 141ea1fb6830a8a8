"""Where subject triggers read: the stream holding their subject, or one made for them, which
goes with the last trigger reading it."""

from __future__ import annotations

from pathlib import Path

import pytest
from nats.js.api import StreamConfig
from nats.js.errors import NotFoundError

from noetl_stream.bus.connection import Bus
from noetl_stream.dsl.composition import load_with_children
from noetl_stream.server import trigger_ops
from noetl_stream.state.catalog import register_files, register_path
from noetl_stream.triggers.document import parse_trigger

ROOT = Path(__file__).resolve().parents[2]


def _doc(name: str, subject: str) -> str:
    return (f"apiVersion: noetl.io/v2\nkind: Trigger\nmetadata: {{name: {name}}}\n"
            f"spec: {{playbook: examples/triggers/report, on: {{subject: '{subject}'}}}}\n")


async def _apply(bus: Bus, name: str, subject: str) -> trigger_ops.TriggerRecord:
    text = _doc(name, subject)
    record, _ = await trigger_ops.apply(bus, parse_trigger(text), text)
    return record


@pytest.fixture
async def registered(bus: Bus) -> Bus:
    composed = load_with_children(ROOT / "playbooks" / "examples" / "triggers" / "report.yaml")
    await register_files(bus.js, composed.files)
    await register_path(bus.js, composed.playbook, composed.files[0].key)
    return bus


async def _consumers(bus: Bus, stream: str) -> list[str]:
    return sorted(c.name for c in await bus.js.consumers_info(stream))


async def test_a_stream_made_for_a_subject_stays_while_another_trigger_reads_it(
        registered: Bus) -> None:
    bus = registered
    first = await _apply(bus, "first", "orders.*.created")
    second = await _apply(bus, "second", "orders.*.created")
    assert first.source is not None and second.source is not None
    assert (first.source.stream, first.source.owns_stream) == ("NOETL_ON_first", True)
    assert (second.source.stream, second.source.owns_stream) == ("NOETL_ON_first", True)
    assert await _consumers(bus, "NOETL_ON_first") == ["noetl-trigger-first", "noetl-trigger-second"]

    await trigger_ops.delete(bus, "first")
    assert await _consumers(bus, "NOETL_ON_first") == ["noetl-trigger-second"]
    await trigger_ops.delete(bus, "second")
    with pytest.raises(NotFoundError):
        await bus.js.stream_info("NOETL_ON_first")


async def test_a_users_stream_is_read_and_kept(registered: Bus) -> None:
    bus = registered
    await bus.js.add_stream(StreamConfig(name="SHOP", subjects=["shop.>"]))
    record = await _apply(bus, "paid", "shop.*.paid")
    assert record.source is not None
    assert (record.source.stream, record.source.owns_stream) == ("SHOP", False)
    moved = await _apply(bus, "paid", "billing.paid")  # the subject changed: a stream made for it
    assert moved.source is not None and moved.source.stream == "NOETL_ON_paid"
    assert await _consumers(bus, "SHOP") == []
    await trigger_ops.delete(bus, "paid")
    assert (await bus.js.stream_info("SHOP")).config.name == "SHOP"
