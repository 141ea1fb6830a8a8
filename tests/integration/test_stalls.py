"""The stall check (server/stalls.py) through the real server and worker, with a 4 s retention
(a check every second): what a running execution waits for and can no longer come fails its step
with the reason, instead of leaving it `running` in silence; what is merely slow is left alone.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from noetl_stream.bus.connection import Bus
from noetl_stream.bus.provision import provision
from noetl_stream.services import run_services, submit_and_watch
from noetl_stream.testing.waiting import assert_eventually
from playbook_files import read_playbook

pytestmark = pytest.mark.integration

LATE_POOL = read_playbook("integration", "stalls_late_pool.yaml")
TIMER = read_playbook("integration", "stalls_timer.yaml")
DELAYED = read_playbook("integration", "stalls_delayed.yaml")
SLOW = read_playbook("integration", "watchdog_slow.yaml").replace("{timeout: 1}", "{timeout: 3}")


@pytest.fixture
async def checked(bus: Bus, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[None]:
    monkeypatch.setenv("NOETL_STREAM_RETENTION", "4s")
    async with run_services(bus, python_children=1):
        yield


def start(bus: Bus, execution_id: str, playbook: str) -> asyncio.Task[dict[str, Any]]:
    return asyncio.create_task(submit_and_watch(
        bus, playbook_text=playbook, playbook_file=f"{execution_id}.yaml", payload={},
        on_event=lambda e: None, execution_id=execution_id, timeout_s=60))


async def stored(bus: Bus, stream: str, subjects: str) -> int:
    info = await bus.js.stream_info(stream, subjects_filter=subjects)
    return sum((info.state.subjects or {}).values())


async def test_a_removed_command_fails_its_step_a_waiting_one_does_not(
        bus: Bus, checked: None) -> None:
    await provision(bus, pools=("default", "late"))  # declared, but no worker serves it
    run = start(bus, "lostcmd1", LATE_POOL)

    async def waiting() -> None:
        assert await stored(bus, "NOETL_COMMANDS", "noetl.commands.late.>") == 1

    await assert_eventually(waiting, timeout_s=20)
    await asyncio.sleep(4)  # four checks: a command still stored is waited for, not lost
    assert not run.done()
    await bus.js.purge_stream("NOETL_COMMANDS", subject="noetl.commands.late.>")
    final = await asyncio.wait_for(run, 30)
    assert final["status"] == "failed"
    error = final["steps"]["start"]["error"]
    assert error["kind"] == "lost"
    assert "cmd:lostcmd1.start.1:-:1" in error["message"]
    assert "gone from NOETL_COMMANDS" in error["message"]


async def test_a_deleted_timer_schedule_fails_its_listener(bus: Bus, checked: None) -> None:
    run = start(bus, "losttimer1", TIMER)
    schedule = "noetl.events.losttimer1.timer.schedule.later"

    async def scheduled() -> None:
        assert await stored(bus, "NOETL_EVENTS", schedule) == 1

    await assert_eventually(scheduled, timeout_s=20)
    await bus.js.purge_stream("NOETL_EVENTS", subject=schedule)
    final = await asyncio.wait_for(run, 30)
    assert final["status"] == "failed"
    error = final["steps"]["wait"]["error"]
    assert error["kind"] == "lost"
    assert "timer later" in error["message"] and "never fired" in error["message"]


async def test_a_timer_left_alone_fires_and_nothing_is_called_lost(bus: Bus, checked: None) -> None:
    final = await asyncio.wait_for(start(bus, "keptimer1", TIMER), 30)
    assert final["status"] == "completed", final


async def test_a_deleted_watchdog_timer_still_times_its_step_out(
        bus: Bus, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOETL_STREAM_RETENTION", "4s")
    decl = bus.topology.pool_consumer("default")
    schedules = "noetl.events.lostwatch1.timer.schedule.>"
    async with run_services(bus, worker=False):
        run = start(bus, "lostwatch1", SLOW)
        # A worker that takes the command and never answers: only the watchdog can end the step.
        silent = await bus.js.pull_subscribe_bind(decl.durable, stream=decl.stream)
        assert len(await silent.fetch(1, timeout=10)) == 1

        async def armed() -> None:
            assert await stored(bus, "NOETL_EVENTS", schedules) == 1

        await assert_eventually(armed, timeout_s=20)
        await bus.js.purge_stream("NOETL_EVENTS", subject=schedules)
        final = await asyncio.wait_for(run, 40)
        await silent.unsubscribe()
    assert final["status"] == "failed"
    error = final["steps"]["start"]["error"]
    assert error["kind"] == "timeout"
    assert "never fired" in error["message"]


async def test_a_command_committed_and_never_published_goes_out(bus: Bus, checked: None) -> None:
    await provision(bus, pools=("default", "late"))  # declared, but no worker serves it
    run = start(bus, "sent1", LATE_POOL)

    async def waiting(n: int) -> None:
        assert await stored(bus, "NOETL_COMMANDS", "noetl.commands.late.>") == n

    await assert_eventually(lambda: waiting(1), timeout_s=20)
    # The state a server committed and died before publishing: the same execution under an id
    # whose command no stream has seen.
    kv = await bus.js.key_value("noetl_executions")
    text = bytes((await kv.get("sent1")).value or b"").decode()
    assert "cmd:sent1.start.1:-:1" in text
    await kv.create("unsent1", text.replace("sent1", "unsent1").encode())
    await assert_eventually(lambda: waiting(2), timeout_s=20)
    info = await bus.js.stream_info("NOETL_COMMANDS")
    last = await bus.js.get_msg("NOETL_COMMANDS", seq=int(info.state.last_seq))
    assert (last.headers or {}).get("Nats-Msg-Id") == "cmd:unsent1.start.1:-:1"
    state = await kv.get("unsent1")
    assert b'"status":"running"' in (state.value or b"")  # published, not failed
    run.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await run


async def test_a_delayed_token_whose_timer_is_deleted_is_delivered_late(
        bus: Bus, checked: None) -> None:
    run = start(bus, "lostdelay1", DELAYED)
    schedule = "noetl.events.lostdelay1.timer.schedule.next.1"

    async def scheduled() -> None:
        assert await stored(bus, "NOETL_EVENTS", schedule) == 1

    await assert_eventually(scheduled, timeout_s=20)
    await bus.js.purge_stream("NOETL_EVENTS", subject=schedule)
    final = await asyncio.wait_for(run, 30)
    assert final["status"] == "completed", final
    assert final["steps"]["later"]["status"] == "completed"
    fired = await bus.js.get_last_msg("NOETL_EVENTS", "noetl.events.lostdelay1.timer.fired")
    assert b"its schedule was lost" in fired.data
