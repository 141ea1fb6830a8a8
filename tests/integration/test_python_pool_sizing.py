"""The worker's python interpreters follow the work: the pool grows with python steps running at
once, and what they leave idle retires after the idle time, down to the few kept ready."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from noetl_stream.bus.connection import Bus
from noetl_stream.services import run_services, submit_and_watch
from noetl_stream.testing.waiting import assert_eventually
from noetl_stream.tools.base import TaskCall
from noetl_stream.tools.python import PythonTool, runner_source
from noetl_stream.tools.python_sizing import DEFAULT_READY_MIN

pytestmark = pytest.mark.integration

AT_ONCE = 4
IDLE_S = 1.0
STEP_S = 5.0  # long enough that AT_ONCE steps started one after another still overlap

PLAYBOOK = f"""\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: pool_sizing
workflow:
  - step: nap
    tool:
      kind: python
      code: |
        import os, time
        started = time.monotonic()
        time.sleep({STEP_S})
        result = {{"pid": os.getpid(), "started": started, "ended": time.monotonic()}}
"""


def _argv(pid: int) -> list[bytes]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return []


def _children(pid: int) -> list[int]:
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            found += [int(c) for c in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
    return found


def interpreters() -> int:
    """Python children of this process that can run a step: forked by the fork server, or
    started as interpreters when there is none (the fork server itself runs no step).
    """
    runner = runner_source().encode()
    count = 0
    for pid in _children(os.getpid()):
        argv = _argv(pid)
        if runner not in argv:
            continue
        if b"fork-server" in argv:
            count += len(_children(pid))
        else:
            count += 1
    return count


@contextlib.asynccontextmanager
async def peak_of(counter: list[int]) -> AsyncIterator[None]:
    """Keep the largest interpreter count seen in `counter[0]` while the block runs."""

    async def watch() -> None:
        while True:
            counter[0] = max(counter[0], interpreters())
            await asyncio.sleep(0.05)

    task = asyncio.create_task(watch())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def naps_at_once(bus: Bus) -> list[dict[str, Any]]:
    finals = await asyncio.gather(*(
        submit_and_watch(bus, playbook_text=PLAYBOOK, playbook_file="pool_sizing.yaml",
                         payload={}, on_event=lambda _: None, timeout_s=60)
        for _ in range(AT_ONCE)))
    for final in finals:
        assert final["status"] == "completed", final.get("error")
    return [final["steps"]["nap"]["result"] for final in finals]


async def settles_at(count: int) -> None:
    async def settled() -> None:
        assert interpreters() == count

    # Retired within the idle time and a reaper round; generous for a loaded machine.
    await assert_eventually(settled, timeout_s=IDLE_S * 4 + 20)


async def test_the_pool_grows_with_concurrent_steps_and_idle_interpreters_retire(bus: Bus) -> None:
    async with run_services(bus, python_children=AT_ONCE, python_idle_s=IDLE_S):
        await settles_at(DEFAULT_READY_MIN)  # a worker that ran no python step holds the minimum
        for _ in range(2):  # and after retiring, the pool grows again when the work comes back
            peak = [0]
            async with peak_of(peak):
                naps = await naps_at_once(bus)

            # The steps ran at once, each execution in an interpreter of its own...
            assert max(n["started"] for n in naps) < min(n["ended"] for n in naps)
            assert len({n["pid"] for n in naps}) == AT_ONCE
            assert peak[0] >= AT_ONCE
            # ...and once no step comes for the idle time, only the minimum is left.
            await settles_at(DEFAULT_READY_MIN)
            await asyncio.sleep(IDLE_S * 2)
            assert interpreters() == DEFAULT_READY_MIN  # and it stays there


async def test_an_ended_executions_interpreter_makes_way_instead_of_the_pool_growing() -> None:
    tool = PythonTool(max_children=4, warm=2, idle_s=60.0)  # never retired by the idle time here
    await tool.start()
    try:
        pids = []
        for n in range(5):  # one-step executions, each after the last one's interpreter went stale
            outcome = await tool.run(_step(f"once{n}"))
            assert outcome.ok, outcome.error
            pids.append(outcome.result)
            await asyncio.sleep(tool.sizing.recycle_s + 0.2)
        busy = [(await tool.run(_step("busy"))).result for _ in range(3)]

        assert len(set(pids)) == 5  # still one interpreter per execution
        assert len(set(busy)) == 1  # an execution stepping often keeps its own
        # Five executions came, one at a time: the pool held one at a time, not five.
        await assert_eventually(lambda: _at_most(tool.sizing.ready_max + 2), timeout_s=20)
    finally:
        await tool.close()


def _at_most(count: int) -> None:
    assert interpreters() <= count


def _step(execution_id: str) -> TaskCall:
    return TaskCall(execution_id=execution_id, step="s", task="t", kind="python",
                    config={"code": "import os\nresult = os.getpid()"}, input={}, spec={},
                    idempotency_key=f"{execution_id}.s.1:None:t:1")
