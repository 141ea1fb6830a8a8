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
import contextlib
import itertools
from collections import Counter
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from cli import run_cli
from processes import RoleProcess
from test_triggers import EXAMPLES, apply_text, at, cli, fired, started

from noetl_stream import ids
from noetl_stream.bus.connection import Bus, connect
from noetl_stream.bus.nats_server import NatsServer, free_port, start_nats_server
from noetl_stream.bus.provision import provision
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


@contextlib.asynccontextmanager
async def services_with_report(url: str, tmp_path: Path, name: str) -> AsyncIterator[Bus]:
    """A server and a worker as processes on `url`, with the report playbook registered; the
    test's own connection.
    """
    bus = await connect(url, name=name)
    await provision(bus)
    services = [RoleProcess(role, url, tmp_path) for role in ("server", "worker")]
    for service in services:
        await service.start()
    try:
        out = await run_cli("register", str(EXAMPLES / "report.yaml"), "--nats-url", url)
        assert out.returncode == 0, out.stderr
        yield bus
    finally:
        for service in services:
            await service.stop()
        await bus.close()


@pytest.mark.timeout(180)
async def test_catch_up_all_fires_every_time_missed_while_nats_server_was_down(
        own_nats: tuple[NatsServer, int], tmp_path: Path) -> None:
    nats, port = own_nats
    url = nats.url
    restarted: NatsServer | None = None
    try:
        async with services_with_report(url, tmp_path, "catch-up-test") as bus:
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
        if restarted is not None:
            await restarted.stop()



@pytest.mark.timeout(120)
async def test_a_backfill_starts_one_execution_per_nominal_time_and_twice_is_once(
        nats_server: NatsServer, bus: Bus, tmp_path: Path) -> None:
    url = nats_server.url
    services = [RoleProcess(role, url, tmp_path) for role in ("server", "worker")]
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
            times = sorted(f["nominal_time"] for f in await fired(bus, "nightly"))
            assert len(times) >= 6
            return times

        times = await assert_eventually(all_fired, timeout_s=60, interval_s=0.5)
        await asyncio.sleep(2)
        times = sorted(f["nominal_time"] for f in await fired(bus, "nightly"))
        assert times[:5] == expected and len(times) == 6
        starts = await started(bus)
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


@pytest.mark.timeout(180)
async def test_catch_up_last_fires_only_the_latest_time_missed_while_nats_server_was_down(
        own_nats: tuple[NatsServer, int], tmp_path: Path) -> None:
    """The same downtime under `catch_up: last`, for a cron pattern and for an interval: of the
    three or four fire times missed, exactly one starts an execution, the latest.

    For cron that is the one fire nats-server makes when it is back, whose nominal time is the
    pattern's last instant before that moment: an even second within two seconds before the
    restart. The restart is timed just after an even second, so that fire comes less than a
    second after its nominal time, as an on-time fire would. For an interval nats-server starts
    a new grid when it is back; the server sends the latest instant of the old grid before it.
    """
    nats, port = own_nats
    url = nats.url
    restarted: NatsServer | None = None
    try:
        async with services_with_report(url, tmp_path, "catch-up-last-test") as bus:
            await apply_text(url, tmp_path, "latest", 'schedule: {cron: "*/2 * * * * *"}\n'
                             "  catch_up: last", '{day: "{{ trigger.nominal_time }}"}')
            await apply_text(url, tmp_path, "pulse", "schedule: {every: 2s}\n  catch_up: last",
                             '{day: "{{ trigger.nominal_time }}"}')

            async def fires(name: str, n: int) -> list[datetime]:
                times = sorted(at(f["nominal_time"]) for f in await fired(bus, name))
                assert len(times) >= n
                return times

            await assert_eventually(lambda: fires("latest", 2), timeout_s=30, interval_s=0.3)
            await assert_eventually(lambda: fires("pulse", 2), timeout_s=30, interval_s=0.3)
            await nats.stop()
            down_at = datetime.now().astimezone()
            # Back just after an even second: its one fire is then stored less than a second after
            # its nominal time, and must still stand for the whole downtime.
            await asyncio.sleep(8 + (2.1 - down_at.second % 2 - down_at.microsecond / 1e6) % 2)
            restart_began = datetime.now().astimezone()
            restarted = await start_nats_server(nats.store_dir.parent, port=port, record=False)
            up_at = datetime.now().astimezone()

            async def past_restart(name: str) -> None:
                assert max(await fires(name, 1)) > up_at + timedelta(seconds=3)

            await assert_eventually(lambda: past_restart("latest"), timeout_s=60, interval_s=0.5)
            await assert_eventually(lambda: past_restart("pulse"), timeout_s=60, interval_s=0.5)
            await cli(url, "pause", "latest")
            await cli(url, "pause", "pulse")
            await asyncio.sleep(2)

            cron_times = await fires("latest", 1)
            assert len(set(cron_times)) == len(cron_times), cron_times
            assert all(t.second % 2 == 0 and t.microsecond == 0 for t in cron_times)
            gaps = [(a, b) for a, b in itertools.pairwise(cron_times) if b - a != timedelta(seconds=2)]
            assert len(gaps) == 1, cron_times  # one jump over the downtime, no other hole
            (before, caught), = gaps
            assert before < down_at and caught - before >= timedelta(seconds=6), cron_times
            # the latest missed instant: the last even second before nats-server was back
            assert restart_began - timedelta(seconds=2) < caught <= up_at, (caught, restart_began)

            pulse_times = await fires("pulse", 1)
            assert len(set(pulse_times)) == len(pulse_times), pulse_times
            last_before = max(t for t in pulse_times if t < down_at)
            latest, *new_grid = [t for t in pulse_times if t > last_before]
            step = timedelta(seconds=2)
            # one instant of the old grid, the latest before the new grid's first fire (less a
            # second), then the new grid, which starts as nats-server comes back
            assert (latest - last_before) % step == timedelta(0) and latest - last_before > step
            assert latest < restart_began and new_grid[0] > restart_began - step, (latest, new_grid)
            assert step / 2 <= new_grid[0] - latest < step * 3 / 2, (latest, new_grid)
            assert all(b - a == step for a, b in itertools.pairwise(new_grid)), new_grid

            starts = await started(bus)
            for name, times in (("latest", cron_times), ("pulse", pulse_times)):
                for t in times:
                    assert len(starts[ids.derived_execution_id("trigger", name, iso_ms(t))]) == 1
    finally:
        if restarted is not None:
            await restarted.stop()
