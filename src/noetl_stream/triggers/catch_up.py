"""Fire times a schedule missed, and the instants a backfill covers. Pure: no clock, no I/O.

A scheduled fire is compared with the latest scheduled nominal time handled before it (the
mark). The schedule's instants strictly between the two were never fired: nats-server was down
across them and, when back, fired once and skipped ahead. A cron fire stored more than
`LATE_S` after its nominal time is that one fire for the missed times (nats-server fires it
when it comes back); on time, a fire is stored within milliseconds of its instant.
"""

from __future__ import annotations

from collections import deque
from datetime import datetime, timedelta

from noetl_stream.triggers.cron import Cron, ScheduleError, every_seconds
from noetl_stream.triggers.document import Schedule

LATE_S = 1.0
MAX_TIMES = 1000  # at most this many missed or backfilled instants, the latest ones


def instants(schedule: Schedule, start: datetime, end: datetime,
             anchor: datetime | None = None) -> list[datetime]:
    """The schedule's instants in [start, end], in order: cron's as nats-server computes them;
    an interval's every N seconds from `anchor` (default `start`). ScheduleError past MAX_TIMES.
    """
    out: list[datetime] = []
    if schedule.every is not None:
        step = timedelta(seconds=every_seconds(schedule.every))
        base = anchor or start
        t = base + step * max(0, -(-(start - base) // step))
        while t <= end:
            out.append(t)
            t += step
            _check_count(out)
        return out
    assert schedule.cron is not None
    cron = Cron.parse(schedule.cron, schedule.timezone)
    t = cron.next_fire(start - timedelta(seconds=1))
    while t <= end:
        out.append(t)
        _check_count(out)
        t = cron.next_fire(t)
    return out


def _check_count(times: list[datetime]) -> None:
    if len(times) > MAX_TIMES:
        raise ScheduleError(f"more than {MAX_TIMES} fire times in the range: ask for a shorter one")


def missed(schedule: Schedule, mark: datetime | None, nominal: datetime) -> list[datetime]:
    """The instants after `mark` and before `nominal` that were never fired (the latest
    MAX_TIMES), nothing without a mark.
    """
    if mark is None or nominal <= mark:
        return []
    if schedule.every is not None:
        # nats-server restarts an interval from when it came back: the old grid's instants
        # until half a step before this fire were missed.
        step = timedelta(seconds=every_seconds(schedule.every))
        end = nominal - step / 2
        count = max(0, int((end - mark) // step))
        first = max(1, count - MAX_TIMES + 1)
        return [mark + step * k for k in range(first, count + 1)]
    assert schedule.cron is not None
    cron = Cron.parse(schedule.cron, schedule.timezone)
    # Walk a window ending at `nominal`, doubled until it holds MAX_TIMES instants or reaches the
    # mark: a long downtime under a dense pattern is not walked from its start.
    window = timedelta(hours=1)
    while True:
        start = max(mark, nominal - window)
        out: deque[datetime] = deque(maxlen=MAX_TIMES)
        t = cron.next_fire(start)
        while t < nominal:
            out.append(t)
            t = cron.next_fire(t)
        if start == mark or len(out) == MAX_TIMES:
            return list(out)
        window *= 2


def is_early(schedule: Schedule, nominal: datetime, stored: datetime) -> bool:
    """Whether a cron fire was stored before the instant it stands for. nats-server, back from
    downtime, reads its clock rounded to the second: back less than half a second before an
    instant, it fires at once with that instant's successor as the next fire, so the instant
    itself is never fired. That fire stands for the instant (its nominal time, worked out from
    the next fire); it is not late, and the times missed before it are caught up as for any
    fire after a gap.
    """
    return schedule.cron is not None and nominal > stored


def is_late(schedule: Schedule, nominal: datetime, stored: datetime) -> bool:
    """Whether a fire nats-server produced is its one fire after downtime (cron only: an
    interval's nominal time is the moment it fired).
    """
    return schedule.cron is not None and (stored - nominal).total_seconds() > LATE_S
