"""A trigger's history read from NOETL_TRIGGERS on a real nats-server: pages oldest first, and
the newest events of one trigger among another's without reading from the beginning."""

from __future__ import annotations

from noetl_stream.bus.connection import Bus
from noetl_stream.server.trigger_history import history, newest_start
from noetl_stream.server.trigger_ops import publish_trigger_event


async def test_pages_and_the_newest_events_of_one_trigger_among_others(bus: Bus) -> None:
    for i in range(40):
        await publish_trigger_event(bus, "a", "failed", f"a-{i}", reason=f"a{i}")
        if i % 3 == 0:
            await publish_trigger_event(bus, "b", "failed", f"b-{i}", reason=f"b{i}")
    first, last_seq = await history(bus, "a", limit=5)
    assert [e["reason"] for e in first] == [f"a{i}" for i in range(5)]
    following, _ = await history(bus, "a", after_seq=last_seq, limit=3)
    assert [e["reason"] for e in following] == ["a5", "a6", "a7"]
    newest, _ = await history(bus, "a", limit=7, newest=True)
    assert [e["reason"] for e in newest] == [f"a{i}" for i in range(33, 40)]
    assert [e["reason"] for e in (await history(bus, "b", limit=2, newest=True))[0]] == [
        "b36", "b39"]
    assert await newest_start(bus, "a", 100) == 0  # fewer than asked: from the beginning
    everything, _ = await history(bus, "a", limit=100, newest=True)
    assert len(everything) == 40
    assert (await history(bus, "nobody", limit=5, newest=True))[0] == []
