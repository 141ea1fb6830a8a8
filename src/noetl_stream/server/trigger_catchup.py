"""`catch_up: none | last | all` when a schedule's fire arrives (docs/triggers.md).

The fire times missed before a scheduled fire (triggers/catch_up.py) are sent as fires of
their own, each under its nominal time (`Nats-Msg-Id` and execution id derived from it), before
the fire itself is acknowledged: a server killed in between sends the same ones again, and they
start nothing twice.
"""

from __future__ import annotations

import asyncio
from datetime import datetime

from noetl_stream.bus.connection import Bus
from noetl_stream.server.trigger_ops import iso_ms, publish_trigger_event, send_fire
from noetl_stream.state import triggers as store
from noetl_stream.state.triggers import TriggerRecord
from noetl_stream.triggers.catch_up import is_early, is_late, missed


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


async def catch_up(bus: Bus, record: TriggerRecord, nominal: str, stored: datetime) -> bool:
    """Send the missed fires the policy keeps; whether this fire itself starts an execution
    (`none` drops the one fire nats-server makes after it was down).
    """
    schedule, name = record.trigger.spec.schedule, record.trigger.name
    assert schedule is not None
    policy = record.trigger.spec.catch_up
    mark = await store.read_mark(bus.js, name)
    when = _at(nominal)
    gap = missed(schedule, _at(mark) if mark else None, when)
    early = is_early(schedule, when, stored)
    # A cron fire after missed instants is the one fire nats-server makes when it is back, its
    # nominal time the latest of them, even when it came back less than LATE_S after it; unless
    # it came back just before an instant, which that fire then stands for (is_early).
    late = not early and (is_late(schedule, when, stored) or
                          (schedule.cron is not None and bool(gap)))
    if policy == "all":
        chosen = gap
    elif policy == "last":
        chosen = gap[-1:] if gap and not late else []
    else:
        chosen = []
    for instant in chosen:
        await send_fire(bus, name, iso_ms(instant), manual=False)
    if policy == "none" and (late or (early and gap)):
        dropped = nominal if late else iso_ms(gap[-1])
        await publish_trigger_event(bus, name, "skipped", f"trg:{name}:skipped:{dropped}",
                                    nominal_time=dropped,
                                    reason="a fire time missed while nats-server was down "
                                    "(catch_up: none)")
        if late:
            return False
    if early:  # start it at its time, not up to half a second before (nats-server's clock)
        await asyncio.sleep(min(1.0, (when - stored).total_seconds()))
    return True
