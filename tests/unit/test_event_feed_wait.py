"""How long an event feed waits for a delivery (bus/event_feed.py `_next`): a wait that hears
nothing for MISSED_HEARTBEATS heartbeat intervals ends with None (the feed then replaces its
consumer), measured from that wait's own start however many deliveries came before it, and a
cancel from outside (stop) still ends the pump."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from typing import Any

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from noetl_stream.bus.event_feed import MISSED_HEARTBEATS, EventFeed

HEARTBEAT_S = 0.05
LIMIT_S = HEARTBEAT_S * MISSED_HEARTBEATS


def feed() -> EventFeed:
    return EventFeed(Client(), "noetl.events.x.>", idle_heartbeat=timedelta(seconds=HEARTBEAT_S))


def delivery(nc: Client) -> Msg:
    return Msg(_client=nc, subject="noetl.events.x.step.done", data=b"{}")


async def timed_next(f: EventFeed) -> tuple[Msg | None, float]:
    started = time.monotonic()
    got = await f._next()
    return got, time.monotonic() - started


def test_a_wait_that_hears_nothing_ends_after_the_limit() -> None:
    got, waited = asyncio.run(timed_next(feed()))
    assert got is None
    assert LIMIT_S <= waited < LIMIT_S + 1.0


def test_each_wait_gets_the_whole_limit_after_deliveries() -> None:
    async def scenario() -> list[tuple[Msg | None, float]]:
        f = feed()
        loop = asyncio.get_running_loop()
        msg = delivery(Client())
        # Deliveries at a third of the limit apart: every wait ends with one, and the timer
        # armed by the first wait rings while later ones have not lasted the limit yet.
        results = []
        for _ in range(5):
            loop.call_later(LIMIT_S / 3, f._inbox.put_nowait, msg)
            results.append(await timed_next(f))
        results.append(await timed_next(f))  # nothing comes any more
        return results

    results = asyncio.run(scenario())
    assert all(got is not None for got, _ in results[:5])
    last, waited = results[5]
    assert last is None
    assert waited >= LIMIT_S


def test_a_cancel_from_outside_is_not_taken_for_the_limit() -> None:
    async def scenario() -> None:
        f = feed()
        pump = asyncio.create_task(f._next())
        await asyncio.sleep(LIMIT_S / 3)
        pump.cancel()
        with pytest.raises(asyncio.CancelledError):
            await pump

    asyncio.run(scenario())


def test_waits_arm_no_timer_each() -> None:
    """Nearly every delivery of a live execution is waited for: the waits share one watchdog
    timer, where a timer per wait would be set and cancelled on the loop the engine runs on.
    """
    async def scenario() -> tuple[int, int]:
        f = feed()
        loop = asyncio.get_running_loop()
        timers = 0
        call_at = loop.call_at

        def counting_call_at(*args: Any, **kwargs: Any) -> asyncio.TimerHandle:
            nonlocal timers
            timers += 1
            return call_at(*args, **kwargs)

        loop.call_at = counting_call_at  # type: ignore[method-assign,assignment]
        msg = delivery(Client())
        taken = 0
        for _ in range(200):
            loop.call_soon(f._inbox.put_nowait, msg)
            taken += await f._next() is msg
        return taken, timers

    taken, timers = asyncio.run(scenario())
    assert taken == 200
    assert timers <= 2
