"""Result objects have no age limit; the retention sweep removes those last written before every
kept execution started (less the refresh margin), and a reused object older than the margin is
written again, so an execution never refers to one the sweep may remove."""

from __future__ import annotations

import asyncio
import base64
import time

import pytest

from noetl_stream import refs
from noetl_stream.bus.connection import Bus
from noetl_stream.errors import InfrastructureError
from noetl_stream.server.result_sweep import purge_unreferenced_objects
from noetl_stream.state import results
from noetl_stream.state.results import ResultStore

pytestmark = pytest.mark.integration


async def meta_seq(bus: Bus, key: str) -> int:
    info = await (await bus.js.object_store(refs.RESULTS_STORE)).get_info(key)
    msg = await bus.js.get_last_msg(f"OBJ_{refs.RESULTS_STORE}",
                                    f"$O.{refs.RESULTS_STORE}.M.{_b64(info.name)}")
    return int(msg.seq or 0)


def _b64(name: str | None) -> str:
    return base64.urlsafe_b64encode(str(name).encode()).decode()


async def test_objects_older_than_every_kept_execution_go_newer_ones_stay(bus: Bus) -> None:
    old = await ResultStore(bus.js).put_bytes(b'"old"' * 1000)
    await asyncio.sleep(1.1)
    oldest_start = time.time()
    new = await ResultStore(bus.js).put_bytes(b'"new"' * 1000)
    removed = await purge_unreferenced_objects(bus, oldest_start=oldest_start, refresh_s=0.5)
    assert removed == 1
    fresh = ResultStore(bus.js)  # no cache
    assert await fresh.fetch(new[refs.REF_KEY]) == b'"new"' * 1000
    with pytest.raises(InfrastructureError, match="missing"):
        await fresh.fetch(old[refs.REF_KEY])
    stream = await bus.js.stream_info(f"OBJ_{refs.RESULTS_STORE}")
    assert stream.state.messages == 2  # the kept object's meta and chunk; nothing of the other


async def test_a_reused_object_older_than_the_margin_is_written_again(
        bus: Bus, monkeypatch: pytest.MonkeyPatch) -> None:
    data = b'"same"' * 1000
    ref = await ResultStore(bus.js).put_bytes(data)
    key = ref[refs.REF_KEY]["key"]
    first = await meta_seq(bus, key)
    await ResultStore(bus.js).put_bytes(data)
    assert await meta_seq(bus, key) == first  # within the margin: reused as it is
    monkeypatch.setattr(results, "REFRESH_S", 0.0)
    await ResultStore(bus.js).put_bytes(data)
    assert await meta_seq(bus, key) > first  # older than the margin: written again
