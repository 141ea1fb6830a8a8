"""Schedules as nats-server runs them: the `Nats-Schedule` value of a trigger's schedule, and the
fire times nats-server computes from it. Pure: no clock, no I/O.

nats-server (2.14+) takes `@every <duration>` and 6-field cron (seconds first) with an optional
`Nats-Schedule-Time-Zone`. Users write the 5-field form, which gets a leading `0` seconds field.
`next_fire` follows nats-server's own cron walk (server/cron.go, after robfig/cron) field by field,
so `trigger list` shows the instant nats-server will choose, daylight saving time included:
a wall-clock time that does not exist on the day clocks go forward is not fired that day (the
hour is skipped), and one that exists twice on the day they go back is fired at both instants.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

_MONTHS = {n: i + 1 for i, n in enumerate(
    ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"))}
_DAYS = {n: i for i, n in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}
_BOUNDS: tuple[tuple[str, int, int, dict[str, int]], ...] = (
    ("second", 0, 59, {}), ("minute", 0, 59, {}), ("hour", 0, 23, {}),
    ("day of month", 1, 31, {}), ("month", 1, 12, _MONTHS), ("day of week", 0, 6, _DAYS))
_ALIASES = {"@yearly": "0 0 0 1 1 *", "@annually": "0 0 0 1 1 *", "@monthly": "0 0 0 1 * *",
            "@weekly": "0 0 0 * * 0", "@daily": "0 0 0 * * *", "@midnight": "0 0 0 * * *",
            "@hourly": "0 0 * * * *"}
_DURATION = re.compile(r"(\d+)(ms|s|m|h|d)")
_UNIT_S = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
_YEARS_AHEAD = 5  # nats-server gives up on a pattern that matches nothing within five years


class ScheduleError(ValueError):
    """A cron pattern, interval or time zone nats-server would refuse."""


def every_seconds(text: str) -> int:
    """`5m`, `1h30m`, `2s`, `1d` as whole seconds (nats-server refuses under a second)."""
    compact = text.replace(" ", "")
    if not compact or _DURATION.sub("", compact):
        raise ScheduleError(f"not an interval: {text!r} (write e.g. 30s, 5m, 1h30m, 1d)")
    total = sum(int(n) * _UNIT_S[u] for n, u in _DURATION.findall(compact))
    if total < 1 or total != int(total):
        raise ScheduleError(f"an interval must be a whole number of seconds, at least 1: {text!r}")
    return int(total)


def go_duration(seconds: int) -> str:
    """The interval as Go's time.ParseDuration reads it (`@every 300s`)."""
    return f"{seconds}s"


def six_fields(cron: str) -> str:
    """The 6-field pattern nats-server takes: a 5-field one gets `0` seconds in front, an alias
    (`@daily`) its 6-field meaning; each field is checked as nats-server checks it.
    """
    pattern = _ALIASES.get(cron.strip(), cron)
    fields = pattern.split()
    if len(fields) == 5:
        fields = ["0", *fields]
    if len(fields) != 6:
        raise ScheduleError(f"a cron pattern has 5 fields (minute hour day month weekday) or 6 "
                            f"(seconds first), not {len(fields)}: {cron!r}")
    for text, bounds in zip(fields, _BOUNDS, strict=True):
        _field_bits(text, bounds)
    return " ".join(fields)


def zone(name: str | None) -> ZoneInfo | None:
    if name is None:
        return None
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ScheduleError(f"unknown time zone: {name!r} (use an IANA name such as "
                            f"Europe/Amsterdam)") from exc


_STAR = 1 << 63


def _value(text: str, names: dict[str, int], what: str) -> int:
    if text.lower() in names:
        return names[text.lower()]
    if not text.isdigit():
        raise ScheduleError(f"{what}: not a number: {text!r}")
    return int(text)


def _range_bits(expr: str, bounds: tuple[str, int, int, dict[str, int]]) -> int:
    what, low, high, names = bounds
    range_part, _, step_part = expr.partition("/")
    star = range_part in ("*", "?")
    if star:
        start, end = low, high
    else:
        first, _, last = range_part.partition("-")
        start = _value(first, names, what)
        end = _value(last, names, what) if last else start
        if step_part and not last:
            end = high  # "N/step" means N to the maximum, every step
    step = 1
    if step_part:
        if not step_part.isdigit() or int(step_part) == 0:
            raise ScheduleError(f"{what}: a step must be a positive number: {expr!r}")
        step = int(step_part)
    if start < low or end > high or start > end:
        raise ScheduleError(f"{what}: {expr!r} is outside {low}-{high}")
    bits = sum(1 << i for i in range(start, end + 1, step))
    return bits | (_STAR if star and step == 1 else 0)


def _field_bits(text: str, bounds: tuple[str, int, int, dict[str, int]]) -> int:
    bits = 0
    for expr in text.split(","):
        if not expr:
            raise ScheduleError(f"{bounds[0]}: empty list item in {text!r}")
        bits |= _range_bits(expr, bounds)
    return bits


@dataclass(frozen=True)
class Cron:
    """A parsed 6-field pattern in a time zone (UTC when none is given)."""

    second: int
    minute: int
    hour: int
    dom: int
    month: int
    dow: int
    tz: ZoneInfo

    @classmethod
    def parse(cls, pattern: str, timezone: str | None = None) -> Cron:
        fields = six_fields(pattern).split()
        second, minute, hour, dom, month, dow = (
            _field_bits(f, b) for f, b in zip(fields, _BOUNDS, strict=True))
        return cls(second, minute, hour, dom, month, dow, zone(timezone) or ZoneInfo("UTC"))

    def _day_matches(self, local: datetime) -> bool:
        dom_match = bool(1 << local.day & self.dom)
        dow_match = bool(1 << (local.isoweekday() % 7) & self.dow)
        if self.dom & _STAR or self.dow & _STAR:
            return dom_match and dow_match
        return dom_match or dow_match

    def _date(self, year: int, month: int, day: int, hour: int = 0, minute: int = 0,
              second: int = 0) -> datetime:
        """Go's time.Date in the schedule's zone: months and days past their end roll over; a
        wall time in a gap or an overlap gets the offset Go's lookup gives it (the offset at the
        wall time read as UTC, unless the result falls outside that offset's period).
        """
        year, month = year + (month - 1) // 12, (month - 1) % 12 + 1
        wall = datetime(year, month, 1, tzinfo=UTC) + timedelta(
            days=day - 1, hours=hour, minutes=minute, seconds=second)
        offset = _offset(wall, self.tz)
        utc = wall - offset
        if _offset(utc, self.tz) != offset:
            offset = _offset(utc, self.tz)
        return wall - offset

    def _add_date(self, t: datetime, months: int = 0, days: int = 0) -> datetime:
        local = t.astimezone(self.tz)
        return self._date(local.year, local.month + months, local.day + days, local.hour,
                          local.minute, local.second)

    def next_fire(self, after: datetime) -> datetime:
        """The first instant after `after` (from the next whole second) the pattern matches."""
        t = after.astimezone(UTC).replace(microsecond=0) + timedelta(seconds=1)
        limit = t.astimezone(self.tz).year + _YEARS_AHEAD
        walk = _Walk(self, t)
        while True:  # each pass that wraps a field starts over, as nats-server's `goto WRAP`
            if walk.t.astimezone(self.tz).year > limit:
                raise ScheduleError("the pattern matches no time within five years")
            if walk.months() and walk.days() and walk.hours() and walk.minutes() \
                    and walk.seconds():
                return walk.t


def _offset(instant: datetime, tz: ZoneInfo) -> timedelta:
    return instant.astimezone(tz).utcoffset() or timedelta(0)


class _Walk:
    """nats-server's field walk; each step returns False when it wrapped (start over)."""

    def __init__(self, cron: Cron, t: datetime) -> None:
        self.cron, self.t, self.truncated = cron, t, False

    def _local(self) -> datetime:
        return self.t.astimezone(self.cron.tz)

    def _truncate(self, to: datetime) -> None:
        if not self.truncated:
            self.truncated = True
            self.t = to

    def months(self) -> bool:
        c = self.cron
        while not 1 << self._local().month & c.month:
            local = self._local()
            self._truncate(c._date(local.year, local.month, 1))
            self.t = c._add_date(self.t, months=1)
            if self._local().month == 1:
                return False
        return True

    def days(self) -> bool:
        c = self.cron
        while not c._day_matches(self._local()):
            local = self._local()
            self._truncate(c._date(local.year, local.month, local.day))
            self.t = c._add_date(self.t, days=1)
            if self._local().day == 1:
                return False
        return True

    def hours(self) -> bool:
        c = self.cron
        while not 1 << self._local().hour & c.hour:
            local = self._local()
            self._truncate(c._date(local.year, local.month, local.day, local.hour))
            self.t += timedelta(hours=1)
            if self._local().hour == 0:
                return False
        return True

    def minutes(self) -> bool:
        while not 1 << self._local().minute & self.cron.minute:
            self._truncate(self.t.replace(second=0))
            self.t += timedelta(minutes=1)
            if self._local().minute == 0:
                return False
        return True

    def seconds(self) -> bool:
        while not 1 << self._local().second & self.cron.second:
            self._truncate(self.t)
            self.t += timedelta(seconds=1)
            if self._local().second == 0:
                return False
        return True


def nominal_time(pattern: str, timezone: str | None, next_at: datetime,
                 fired_at: datetime) -> datetime:
    """The fire time a message nats-server produced stands for, from what it carries:
    `Nats-Schedule-Next` (`next_at`, the fire after it) and when it was stored (`fired_at`, at
    or after its nominal time). For `@every N` that is `next_at - N` (nats-server adds N to
    the fire time); for cron, the last instant the pattern matches before `next_at`. Both
    depend on the message only, so every delivery of one fire names the same time.
    """
    if pattern.startswith("@every "):
        return next_at - timedelta(seconds=every_seconds(pattern[len("@every "):]))
    cron = Cron.parse(pattern, timezone)
    lookback = timedelta(seconds=2)
    while True:
        t = cron.next_fire(fired_at - lookback)
        if t < next_at:
            break
        if lookback > timedelta(days=400):
            return next_at  # nothing before it: the schedule skipped ahead (see docs/triggers.md)
        lookback *= 2
    while (after := cron.next_fire(t)) < next_at:
        t = after
    return t
