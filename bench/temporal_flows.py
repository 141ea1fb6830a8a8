"""The W1-W3 shapes as Temporal workflows, for bench/peer_temporal.py (only temporalio is
imported here, so Temporal's workflow sandbox can load this module as it is).

A step is one activity that returns its input plus one, as the services-mode noop steps read
the previous step's result; W2's aggregation is one activity summing the loop's results.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import activity, workflow

TIMEOUT = timedelta(seconds=60)


@activity.defn
async def step(i: int) -> int:
    return i + 1


@activity.defn
async def total(values: list[int]) -> int:
    return sum(values)


@workflow.defn
class Chain:
    """W1 and W3: `steps` sequential activities, each reading the previous result."""

    @workflow.run
    async def run(self, steps: int) -> int:
        i = 0
        for _ in range(steps):
            i = await workflow.execute_activity(step, i, start_to_close_timeout=TIMEOUT)
        return i


@workflow.defn
class Loop:
    """W2: one activity per item, at most `in_flight` at a time, then one aggregating them."""

    @workflow.run
    async def run(self, items: int, in_flight: int) -> int:
        slots = asyncio.Semaphore(in_flight)

        async def one(x: int) -> int:
            async with slots:
                return await workflow.execute_activity(step, x, start_to_close_timeout=TIMEOUT)

        results = await asyncio.gather(*(one(x) for x in range(items)))
        return await workflow.execute_activity(total, list(results),
                                               start_to_close_timeout=TIMEOUT)
