"""Durable timers as NATS message schedules (ARCHITECTURE §10): no timer wheel of our own.

The router asks for a timer with an outbox message of kind `timer` whose body is the
`timer.fired` event to deliver. It is published once, with a deterministic `Nats-Msg-Id`, on
`<prefix>.events.<id>.timer.schedule.<name>` with `Nats-Schedule: @at <RFC3339 UTC>` and
`Nats-Schedule-Target: <prefix>.events.<id>.timer.fired`; when it is due, the events stream
holds the body on the target subject and the router consumes it like any other event. A second
schedule on the same subject replaces the first, so setting a timer again resets it. The events
stream must allow message schedules (`allow_msg_schedules` in subjects/topology.yaml).

Anyone following the execution's subjects also sees the schedule message itself when it is set.
Its body is the `timer.fired` still to come, so it is read as `timer.scheduled` (with its
`fire_at`): only the message the stream publishes when the timer is due reads as fired.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

from noetl_stream import jsonutil
from noetl_stream.bus.connection import Bus
from noetl_stream.isotime import iso_time
from noetl_stream.messages import SCHEDULE_PREFIX, TIMER_FIRED, TIMER_SCHEDULED
from noetl_stream.router.state import Outgoing

__all__ = ["SCHEDULE_PREFIX", "TIMER_FIRED", "TIMER_SCHEDULED", "publish_timer",
           "schedule_headers", "schedule_time", "timer_message"]


def schedule_time(fire_at_s: float) -> str:
    """`@at` time of a schedule, RFC3339 UTC, rounded up to the next whole second."""
    return datetime.fromtimestamp(math.ceil(fire_at_s), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def schedule_headers(bus: Bus, timer: Outgoing) -> dict[str, str]:
    execution_id = str(timer.plain_body["execution_id"])
    return {
        "Nats-Msg-Id": timer.msg_id,
        "Nats-Schedule": f"@at {schedule_time(float(timer.plain_body['fire_at']))}",
        "Nats-Schedule-Target": bus.topology.event_subject(execution_id, TIMER_FIRED),
    }


def timer_message(bus: Bus, timer: Outgoing) -> tuple[str, bytes, dict[str, str]]:
    """The schedule message of a timer: its subject, body and headers."""
    subject = bus.topology.timer_schedule_subject(str(timer.plain_body["execution_id"]),
                                                  str(timer.plain_body["timer_id"]))
    # The event it becomes happens at `fire_at`: that is its timestamp (set_at says when it was set).
    body = {"event_id": timer.msg_id, "timestamp": timer.plain_body["fire_at"],
            "time": iso_time(float(timer.plain_body["fire_at"])), **timer.plain_body}
    return subject, jsonutil.dumps(body), schedule_headers(bus, timer)


async def publish_timer(bus: Bus, timer: Outgoing) -> None:
    """Store the schedule message; the stream publishes `timer.fired` when it is due."""
    await bus.stored.publish(*timer_message(bus, timer))
