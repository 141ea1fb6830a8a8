"""server/periodic.py: the loop under the retention sweep and the stall check."""

from __future__ import annotations

import asyncio
import logging

import pytest

from noetl_stream.server.periodic import Periodic
from noetl_stream.testing.waiting import assert_eventually


async def test_a_failing_pass_is_logged_and_the_next_one_runs(caplog: pytest.LogCaptureFixture) -> None:
    passes: list[int] = []

    async def run() -> None:
        passes.append(len(passes))
        if len(passes) == 1:
            raise RuntimeError("NATS busy")

    periodic = Periodic("test sweep", run, every_s=0.01)
    with caplog.at_level(logging.WARNING, logger="noetl_stream.server.periodic"):
        periodic.start()

        async def ran_again() -> None:
            assert len(passes) >= 3

        await assert_eventually(ran_again)
        await periodic.stop()
    assert [r.getMessage() for r in caplog.records] == ["test sweep failed: NATS busy"]
    stopped_at = len(passes)
    await asyncio.sleep(0.05)
    assert len(passes) == stopped_at


async def test_the_first_pass_waits_its_delay_and_stop_before_it_runs_nothing() -> None:
    passes: list[None] = []

    async def run() -> None:
        passes.append(None)

    periodic = Periodic("test check", run, every_s=0.01, first_after_s=30)
    periodic.start()
    await asyncio.sleep(0.05)
    await periodic.stop()
    assert passes == []
