"""Fire times missed while nats-server was down, and backfills, against real processes.

The catch-up test needs no long wait: its schedule is `*/2 * * * * *` (6-field cron: every even
second), so stopping nats-server for eight seconds misses three or four fire times. nats-server
keeps the schedule on disk and, started again, fires from its own clock; the server sends the
missed ones as fires of their own (`catch_up: all`). The nominal times that end up fired must
be every even second from the first to the last, each exactly once: a missed time shows as a
gap, a doubled one as a second entry.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from cli import run_cli
from test_triggers import EXAMPLES, Service, apply_text, at, cli, fired, started

from noetl_stream import ids
from noetl_stream.runtime.connection import Bus, connect
from noetl_stream.runtime.nats_server import NatsServer, free_port, start_nats_server
from noetl_stream.runtime.provision import provision
from noetl_stream.testing.waiting import assert_eventually

pytestmark = pytest.mark.e2e


def iso_ms(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@pytest.fixture
async def own_nats(tmp_path: Path) -> AsyncIterator[tuple[NatsServer, int]]:
    """A nats-server this test may stop and start again on the same port and store."""
    port = free_port()
    server = await start_nats_server(tmp_path / "own-nats", port=port, record=False)
    holder = [server]
    try:
        yield server, port
    finally:
        await holder[-1].stop()


@pytest.mark.timeout(180)
async def test_catch_up_all_fires_every_time_missed_while_nats_server_was_down(
        own_nats: tuple[NatsServer, int], tmp_path: Path) -> None:
    nats, port = own_nats
    url = nats.url
    bus = await connect(url, name="catch-up-test")
    await provision(bus)
    services = [Service(role, url, tmp_path) for role in ("server", "worker")]
    for service in services:
        await service.start()
    restarted: NatsServer | None = None
    try:
        out = await run_cli("register", str(EXAMPLES / "report.yaml"), "--nats-url", url)
        assert out.returncode == 0, out.stderr
        await apply_text(url, tmp_path, "even", 'schedule: {cron: "*/2 * * * * *"}\n'
                         "  catch_up: all", '{day: "{{ trigger.nominal_time }}"}')
        await apply_text(url, tmp_path, "gappy", 'schedule: {cron: "*/2 * * * * *"}\n'
                         "  catch_up: none", '{day: "{{ trigger.nominal_time }}"}')

        async def fires(n: int) -> list[str]:
            times = [f["nominal_time"] for f in await fired(bus, "even")]
            assert len(times) >= n
            return times

        await assert_eventually(lambda: fires(2), timeout_s=30, interval_s=0.3)
        await nats.stop()
        down_at = datetime.now().astimezone()
        await asyncio.sleep(8)
        restarted = await start_nats_server(nats.store_dir.parent, port=port, record=False)
        up_at = datetime.now().astimezone()

        async def past_restart() -> list[str]:
            times = await fires(1)
            assert max(at(t) for t in times) > up_at + timedelta(seconds=3)
            return times

        await assert_eventually(past_restart, timeout_s=60, interval_s=0.5)
        await cli(url, "pause", "even")
        await cli(url, "pause", "gappy")
        await asyncio.sleep(2)
        times = [at(t) for t in await fires(1)]
        counts = Counter(times)
        assert max(counts.values()) == 1, [t for t, n in counts.items() if n > 1]
        ordered = sorted(times)
        assert all(t.second % 2 == 0 and t.microsecond == 0 for t in ordered)
        assert all(b - a == timedelta(seconds=2) for a, b in itertools.pairwise(ordered)), ordered
        # the downtime is covered: fire times nats-server never produced were started
        assert sum(down_at < t < up_at for t in ordered) >= 3
        # catch_up: none starts nothing for the downtime (a fire nats-server makes as it comes
        # back is dropped when it is more than a second late)
        gappy = [at(f["nominal_time"]) for f in await fired(bus, "gappy")]
        assert gappy and not [t for t in gappy if down_at + timedelta(seconds=1) < t
                              < up_at - timedelta(seconds=1.5)]
        starts = await started(bus)
        for t in ordered:
            assert len(starts[ids.derived_execution_id("trigger", "even", iso_ms(t))]) == 1
    finally:
        for service in services:
            await service.stop()
        await bus.close()
        if restarted is not None:
            await restarted.stop()


@pytest.fixture
async def nats_bus(nats_server: NatsServer) -> AsyncIterator[Bus]:
    bus = await connect(nats_server.url, name="backfill-test")
    try:
        await provision(bus)
        yield bus
    finally:
        await bus.close()


@pytest.mark.timeout(120)
async def test_a_backfill_starts_one_execution_per_nominal_time_and_twice_is_once(
        nats_server: NatsServer, nats_bus: Bus, tmp_path: Path) -> None:
    url = nats_server.url
    services = [Service(role, url, tmp_path) for role in ("server", "worker")]
    for service in services:
        await service.start()
    try:
        out = await run_cli("register", str(EXAMPLES / "report.yaml"), "--nats-url", url)
        assert out.returncode == 0, out.stderr
        await cli(url, "apply", str(EXAMPLES / "nightly.yaml"))
        await cli(url, "pause", "nightly")  # a backfill runs a paused trigger's times too
        said = await cli(url, "backfill", "nightly", "--from", "2026-10-24T00:00:00Z",
                         "--to", "2026-10-26T01:00:00Z")
        # 02:00 Amsterdam: CEST (00:00 UTC) until the 25th, when 02:00-03:00 comes twice
        first = ["2026-10-24T00:00:00.000Z", "2026-10-25T00:00:00.000Z",
                 "2026-10-25T01:00:00.000Z", "2026-10-26T01:00:00.000Z"]
        assert said.strip() == f"trigger nightly: 4 fire time(s) sent, {first[0]} to {first[-1]}"
        said = await cli(url, "backfill", "nightly", "--from", "2026-10-25T00:30:00Z",
                         "--to", "2026-10-27T12:00:00Z")
        assert "3 fire time(s) sent" in said
        expected = [*first, "2026-10-27T01:00:00.000Z"]
        await cli(url, "fire", "nightly")  # and a fire now, for contrast

        async def all_fired() -> list[str]:
            times = sorted(f["nominal_time"] for f in await fired(nats_bus, "nightly"))
            assert len(times) >= 6
            return times

        times = await assert_eventually(all_fired, timeout_s=60, interval_s=0.5)
        await asyncio.sleep(2)
        times = sorted(f["nominal_time"] for f in await fired(nats_bus, "nightly"))
        assert times[:5] == expected and len(times) == 6
        starts = await started(nats_bus)
        for nominal in expected:
            (start,) = starts[ids.derived_execution_id("trigger", "nightly", nominal)]
            assert start["workload"]["day"] == nominal[:10]
        bad = await run_cli("trigger", "backfill", "nightly", "--from", "2026-10-27T00:00:00Z",
                            "--to", "2026-10-26T00:00:00Z", "--nats-url", url)
        assert bad.returncode == 2 and "before it starts" in bad.stderr
        assert "Traceback" not in bad.stderr
    finally:
        for service in services:
            await service.stop()
