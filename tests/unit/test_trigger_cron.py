"""Schedules: the 5-to-6-field conversion and the fire times nats-server's cron walk gives,
daylight saving time included (server/cron.go)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from noetl_stream.triggers.cron import Cron, ScheduleError, every_seconds, nominal_time, six_fields


def _fires(cron: Cron, start: datetime, n: int) -> list[str]:
    out, t = [], start
    for _ in range(n):
        t = cron.next_fire(t)
        out.append(t.astimezone(cron.tz).isoformat())
    return out


@pytest.mark.parametrize(("written", "sent"), [
    ("0 2 * * *", "0 0 2 * * *"),
    ("*/15 9-17 * * mon-fri", "0 */15 9-17 * * mon-fri"),
    ("*/2 * * * * *", "*/2 * * * * *"),
    ("@daily", "0 0 0 * * *"),
    ("@hourly", "0 0 * * * *"),
])
def test_five_fields_get_a_seconds_field(written: str, sent: str) -> None:
    assert six_fields(written) == sent


@pytest.mark.parametrize("bad", ["0 2 * *", "61 * * * *", "0 2 * * 7", "0 2 31-1 * *",
                                 "0 2 * * */0", "1 2 3 4 5 6 7", "x * * * *"])
def test_patterns_nats_server_refuses_are_refused(bad: str) -> None:
    with pytest.raises(ScheduleError):
        six_fields(bad)


def test_intervals() -> None:
    assert every_seconds("5m") == 300
    assert every_seconds("1h30m") == 5400
    assert every_seconds("2s") == 2
    for bad in ("500ms", "0s", "five", "5", ""):
        with pytest.raises(ScheduleError):
            every_seconds(bad)


def test_spring_forward_skips_the_missing_hour() -> None:
    # Europe/Amsterdam, 2026-03-29: 02:00 CET jumps to 03:00 CEST; 02:30 does not exist.
    cron = Cron.parse("30 2 * * *", "Europe/Amsterdam")
    assert _fires(cron, datetime(2026, 3, 27, tzinfo=UTC), 3) == [
        "2026-03-27T02:30:00+01:00", "2026-03-28T02:30:00+01:00", "2026-03-30T02:30:00+02:00"]


def test_fall_back_fires_the_repeated_hour_twice() -> None:
    # Europe/Amsterdam, 2026-10-25: 03:00 CEST goes back to 02:00 CET; 02:30 happens twice.
    cron = Cron.parse("30 2 * * *", "Europe/Amsterdam")
    assert _fires(cron, datetime(2026, 10, 24, 12, tzinfo=UTC), 3) == [
        "2026-10-25T02:30:00+02:00", "2026-10-25T02:30:00+01:00", "2026-10-26T02:30:00+01:00"]


def test_a_daily_time_outside_the_change_keeps_its_wall_clock() -> None:
    cron = Cron.parse("0 9 * * *", "America/New_York")
    assert _fires(cron, datetime(2026, 11, 0o1, tzinfo=UTC), 2) == [
        "2026-11-01T09:00:00-05:00", "2026-11-02T09:00:00-05:00"]


def test_day_of_month_or_day_of_week_when_both_are_restricted() -> None:
    # robfig/cron and nats-server: either matches when neither field is `*`.
    cron = Cron.parse("0 0 13 * fri")
    assert _fires(cron, datetime(2026, 11, 1, tzinfo=UTC), 3) == [
        "2026-11-06T00:00:00+00:00", "2026-11-13T00:00:00+00:00", "2026-11-20T00:00:00+00:00"]


def test_seconds_in_a_time_zone() -> None:
    cron = Cron.parse("*/2 * * * * *", "Asia/Kolkata")
    start = datetime(2026, 1, 1, 0, 0, 0, 500_000, tzinfo=UTC)
    assert [t[11:19] for t in _fires(cron, start, 3)] == ["05:30:02", "05:30:04", "05:30:06"]


def test_nominal_time_of_a_fire() -> None:
    pattern = "0 */5 * * * *"
    nominal = datetime(2026, 5, 1, 10, 5, tzinfo=UTC)
    nxt = datetime(2026, 5, 1, 10, 10, tzinfo=UTC)
    for late in (0, 0.3, 7, 299):
        assert nominal_time(pattern, None, nxt, nominal + timedelta(seconds=late)) == nominal
    every = nominal_time("@every 300s", None, nxt, nominal + timedelta(seconds=1))
    assert every == nominal


def test_schedule_next_as_nats_server_writes_it() -> None:
    # In the schedule's zone with its offset (cron with a time zone), or in UTC.
    from noetl_stream.server.triggers import _parse_time

    assert _parse_time("2026-11-26T17:01:00+05:30") == datetime(2026, 11, 26, 11, 31, tzinfo=UTC)
    assert _parse_time("2026-11-26T11:30:10Z") == datetime(2026, 11, 26, 11, 30, 10, tzinfo=UTC)
    assert _parse_time("2026-11-26T11:30:10.123456789Z").microsecond == 123456
    with pytest.raises(ValueError):
        _parse_time("tomorrow")


def test_a_fire_nats_server_makes_just_before_an_instant_stands_for_that_instant() -> None:
    # Back at 10:04:59.7 after missing 10:00:00, nats-server rounds its clock to 10:05:00 and
    # fires at once with 10:10:00 as the next fire: 10:05:00 itself is never fired.
    from noetl_stream.triggers.catch_up import is_early, is_late, missed
    from noetl_stream.triggers.document import Schedule

    schedule = Schedule(cron="*/5 * * * *")
    stored = datetime(2026, 5, 1, 10, 4, 59, 700000, tzinfo=UTC)
    nxt = datetime(2026, 5, 1, 10, 10, tzinfo=UTC)
    nominal = nominal_time(schedule.nats_schedule(), None, nxt, stored)
    assert nominal == datetime(2026, 5, 1, 10, 5, tzinfo=UTC)
    assert is_early(schedule, nominal, stored) and not is_late(schedule, nominal, stored)
    mark = datetime(2026, 5, 1, 9, 55, tzinfo=UTC)
    assert missed(schedule, mark, nominal) == [datetime(2026, 5, 1, 10, 0, tzinfo=UTC)]
    # An on-time fire, and an interval's (named by nats-server's rounded clock), are not early.
    assert not is_early(schedule, nominal, nominal + timedelta(milliseconds=3))
    assert not is_early(Schedule(every="5m"), nominal, stored)
