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
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cli import run_cli
from processes import RoleProcess
from test_triggers import EXAMPLES, apply_text, at, cli, fired, started

from noetl_stream import ids, jsonutil
from noetl_stream.bus.connection import Bus, connect
from noetl_stream.bus.nats_server import NatsServer, free_port, start_nats_server
from noetl_stream.bus.provision import provision
from noetl_stream.testing.events import stored_messages
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


async def schedule_fires(bus: Bus, name: str) -> list[datetime]:
    """When each fire nats-server produced for `name` was stored (not those a server sent)."""
    subject = f"noetl.triggers.fire.{name}"
    info = await bus.js.stream_info("NOETL_TRIGGERS", subjects_filter=subject)
    expected = sum((info.state.subjects or {}).values())
    sub = await bus.js.subscribe(subject, stream="NOETL_TRIGGERS", ordered_consumer=True)
    out = []
    try:
        for _ in range(expected):
            msg = await sub.next_msg(timeout=5)
            if "Nats-Schedule-Next" in (msg.headers or {}):
                out.append(msg.metadata.timestamp.astimezone(UTC))
    finally:
        await sub.unsubscribe()
    return out


async def skipped(bus: Bus, name: str) -> list[str]:
    return [jsonutil.loads(data)["nominal_time"] for _, data in await stored_messages(
        bus.js, f"noetl.triggers.events.{name}.skipped", stream="NOETL_TRIGGERS")]


@pytest.mark.timeout(300)
async def test_nats_server_back_just_before_a_fire_time_names_that_time_and_catches_up_before(
        own_nats: tuple[NatsServer, int], tmp_path: Path) -> None:
    """nats-server, back less than half a second before a fire time F, rounds its clock up to F:
    its one fire after the downtime is stored before F and the schedule's next fire is the one
    after F, so F itself is never fired. That fire stands for F (started once F is reached), and
    the instants missed before it are what `catch_up` decides on: `none` skips the latest of
    them (not F), `last` starts it as well as F.

    The restart is aimed at 0.25 s before an even second; where it lands depends on how long
    nats-server takes to start, so it is tried again (aimed by what the last try measured) until
    a fire lands there.
    """
    nats, port = own_nats
    servers = [nats]
    try:
        async with services_with_report(nats.url, tmp_path, "catch-up-early-test") as bus:
            for name, policy in (("early_none", "none"), ("early_last", "last")):
                await apply_text(nats.url, tmp_path, name, 'schedule: {cron: "*/2 * * * * *"}\n'
                                 f"  catch_up: {policy}", '{day: "{{ trigger.nominal_time }}"}')

            async def fires(name: str) -> list[datetime]:
                times = sorted(at(f["nominal_time"]) for f in await fired(bus, name))
                assert times
                return times

            await assert_eventually(lambda: fires("early_none"), timeout_s=30, interval_s=0.3)
            await assert_eventually(lambda: fires("early_last"), timeout_s=30, interval_s=0.3)
            startup_s, early = 0.2, None
            for _ in range(6):
                await servers[-1].stop()
                down_at = datetime.now(UTC)
                # Sleep 5-7 s (two or three even seconds missed), so that nats-server's clock
                # reads 0.25 s before an even second when it fires.
                wake = down_at + timedelta(seconds=5)
                target = wake.replace(microsecond=0) + timedelta(
                    seconds=1 + (wake.second + 1) % 2, milliseconds=-250)
                await asyncio.sleep((target - timedelta(seconds=startup_s)
                                     - datetime.now(UTC)).total_seconds())
                began = datetime.now(UTC)
                servers.append(await start_nats_server(nats.store_dir.parent, port=port,
                                                       record=False))

                async def back_fire(began: datetime = began) -> datetime:
                    later = [t for t in await schedule_fires(bus, "early_none") if t > began]
                    assert later
                    return later[0]

                stored = await assert_eventually(back_fire, timeout_s=30, interval_s=0.2)
                startup_s = max(0.0, (stored - began).total_seconds() - 0.05)
                due = stored.replace(microsecond=0) + timedelta(seconds=1 + (stored.second + 1) % 2)
                # Under 0.4 s: nats-server read its clock a little before it stored the fire.
                if due - stored < timedelta(seconds=0.4):
                    early = (stored, due)
                    break
            assert early is not None, "nats-server never came back in the half second before a fire"
            stored, due = early
            missed_latest = due - timedelta(seconds=2)
            assert missed_latest > down_at  # it was missed

            async def past(name: str) -> None:
                assert max(await fires(name)) >= due + timedelta(seconds=4)

            await assert_eventually(lambda: past("early_none"), timeout_s=60, interval_s=0.5)
            await assert_eventually(lambda: past("early_last"), timeout_s=60, interval_s=0.5)
            await cli(servers[-1].url, "pause", "early_none")
            await cli(servers[-1].url, "pause", "early_last")

            none_times = await fires("early_none")
            assert due in none_times and len(none_times) == len(set(none_times)), none_times
            assert missed_latest not in none_times, none_times
            assert iso_ms(due) not in await skipped(bus, "early_none")
            assert iso_ms(missed_latest) in await skipped(bus, "early_none")
            last_times = await fires("early_last")
            assert {due, missed_latest} <= set(last_times), (due, last_times)
            assert len(last_times) == len(set(last_times)), last_times
            starts = await started(bus)
            for name in ("early_none", "early_last"):
                (start,) = starts[ids.derived_execution_id("trigger", name, iso_ms(due))]
                # started once F was reached, not on the early fire's arrival
                assert start["timestamp"] >= due.timestamp(), (start["timestamp"], due)
    finally:
        for server in servers[1:]:
            await server.stop()
