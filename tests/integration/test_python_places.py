"""Where python children run, and what happens to it between executions (tools/python.py,
tools/python_slots.py): a child's place is cleared off the step's path, yet its slot's uid serves
no later child before the clearing is done; fresh children are started ahead for a burst of new
executions; a slot's kill sweep leaves nothing of a forking leftover."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from noetl_stream.testing.waiting import assert_eventually
from noetl_stream.tools.base import TaskCall
from noetl_stream.tools.python import PythonTool
from noetl_stream.tools.python_slots import SandboxUser, clear_slots

pytestmark = pytest.mark.integration

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="slot uids need a root worker")
# Uids no account has, apart from those of tests/unit/test_python_slots.py.
TEST_UIDS = range(3_999_980_000, 3_999_980_005)

# What a step finds of earlier holders of its uid: processes (from /proc) and files in /tmp.
SNOOP = """\
import os, subprocess
me = os.getuid()

def running_as_me(pid):
    # Whether `pid` runs as this uid (a zombie, dead and waiting to be reaped, does not).
    try:
        with open(f"/proc/{pid}/status") as f:
            status = dict(line.split(":", 1) for line in f if ":" in line)
    except OSError:
        return False
    return int(status["Uid"].split()[0]) == me and not status["State"].strip().startswith("Z")


def mine(name):
    try:
        return os.lstat(os.path.join("/tmp", name)).st_uid == me
    except FileNotFoundError:  # another worker's clearing took it
        return False


others = [p for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()
          and running_as_me(p)]
own = os.path.realpath(os.environ["HOME"])
found = [n for n in os.listdir("/tmp") if mine(n) and os.path.join("/tmp", n) != own]
# Leave behind what the next holder of this uid must not find: a daemon, a file, and enough
# files in this place that clearing it takes a while.
subprocess.Popen(["sleep", "60"], start_new_session=True)
open(f"/tmp/noetl-left-by-{execution_id}", "w").close()
for n in range(int(files)):
    open(os.path.join(os.environ["HOME"], f"f{n}"), "w").close()
result = {"uid": me, "others": others, "found": found, "home": os.environ["HOME"]}
"""


def _step(execution_id: str, code: str = SNOOP, **inputs: object) -> TaskCall:
    return TaskCall(execution_id=execution_id, step="s", task="t", kind="python",
                    config={"code": code}, input=dict(inputs), spec={},
                    idempotency_key=f"{execution_id}.s.1:None:t:1")


@pytest.fixture
async def one_at_a_time(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[PythonTool]:
    """One step at a time, four interpreters kept, none started ahead (every new execution's
    child is forked when its step comes), and five uids: the four kept and one spare.
    """
    monkeypatch.setenv("NOETL_STREAM_PYTHON_UIDS", f"{TEST_UIDS.start}-{TEST_UIDS.stop - 1}")
    tool = PythonTool(max_children=1, warm=0, idle_s=600.0)
    await tool.start()
    try:
        yield tool
    finally:
        await tool.close()


@root_only
@pytest.mark.timeout(180)
async def test_a_new_executions_step_does_not_wait_for_an_ended_childs_place_to_be_cleared(
        one_at_a_time: PythonTool) -> None:
    tool = one_at_a_time
    first = await tool.run(_step("e0", files=30_000))  # a place slow to clear
    assert first.ok, first.error
    home = Path(first.result["home"])
    for n in (1, 2, 3):  # every interpreter kept is now taken
        assert (await tool.run(_step(f"e{n}", files=0))).ok

    started = time.monotonic()
    outcome = await tool.run(_step("e4", files=0))  # e0's interpreter makes way
    took = time.monotonic() - started

    assert outcome.ok, outcome.error
    assert outcome.result["uid"] != first.result["uid"]  # e0's uid is not free yet
    # The step is done while e0's place is still being cleared...
    assert await asyncio.to_thread(home.exists), f"cleared within the step's {took:.3f} s"

    # ...and the clearing ends soon after.
    async def cleared() -> None:
        assert not await asyncio.to_thread(home.exists)

    await assert_eventually(cleared, timeout_s=120)


@root_only
@pytest.mark.timeout(300)
async def test_a_slot_uid_serves_no_later_child_before_its_clearing_is_done(
        one_at_a_time: PythonTool) -> None:
    tool = one_at_a_time
    seen = []
    for n in range(14):  # new executions, one after another: five uids serve them in turn
        outcome = await tool.run(_step(f"x{n}", files=3_000))
        assert outcome.ok, outcome.error
        seen.append(outcome.result)

    uids = [s["uid"] for s in seen]
    assert set(uids) <= set(TEST_UIDS)
    assert len(uids) > len(set(uids))  # uids were handed on, so the checks below mean something
    for s in seen:
        assert s["others"] == [], f"uid {s['uid']} found an earlier holder's processes"
        assert s["found"] == [], f"uid {s['uid']} found an earlier holder's files"


@pytest.mark.timeout(120)
async def test_a_burst_of_new_executions_finds_its_children_started() -> None:
    tool = PythonTool(max_children=4, idle_s=600.0)
    await tool.start()
    started_at = ("import os\n"
                  "with open('/proc/self/stat') as f:\n"
                  "    ticks = int(f.read().rsplit(')', 1)[1].split()[19])\n"
                  "result = ticks / os.sysconf('SC_CLK_TCK')\n")
    try:
        first = await asyncio.gather(*(tool.run(_step(f"a{n}", started_at)) for n in range(4)))
        assert all(o.ok for o in first), [o.error for o in first]

        # Four new executions came at once: four fresh children are started for the next ones
        # (each process started no later than this, by the clock /proc counts from).
        async def ready() -> None:
            assert tool.ready == 4

        await assert_eventually(ready, timeout_s=30)
        await asyncio.sleep(0.05)  # past the 10 ms resolution of a process's start time
        burst_at = time.clock_gettime(time.CLOCK_BOOTTIME)
        second = await asyncio.gather(*(tool.run(_step(f"b{n}", started_at)) for n in range(4)))
    finally:
        await tool.close()
    assert all(o.ok for o in second), [o.error for o in second]
    assert all(o.result < burst_at for o in second), (burst_at, [o.result for o in second])


@root_only
@pytest.mark.timeout(120)
async def test_a_slots_kill_sweep_leaves_nothing_of_a_forking_leftover() -> None:
    uid = TEST_UIDS.stop - 1
    user = SandboxUser(f"noetl-python-{uid}", uid, uid, exclusive=True)
    # As the slot's uid (never as root: `kill -1` there would reach every process), a leftover
    # that keeps forking.
    leftover = subprocess.Popen(
        ["/bin/sh", "-c", "while :; do sleep 30 & sh -c 'sleep 30 &' ; done"],
        user=uid, group=uid, extra_groups=[], start_new_session=True,
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={"PATH": "/usr/bin:/bin"})
    try:
        await asyncio.sleep(0.3)
        assert len(await asyncio.to_thread(_processes_of, uid)) > 3
        await asyncio.to_thread(clear_slots, [user], kill=[user])

        async def none_left() -> None:  # a killed process may take a moment to be gone
            assert await asyncio.to_thread(_processes_of, uid) == []

        await assert_eventually(none_left, timeout_s=30)
    finally:
        leftover.kill()
        leftover.wait()


def _processes_of(uid: int) -> list[int]:
    """Live (not zombie) processes of `uid`."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            status = Path(f"/proc/{name}/status").read_text()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if int(fields["Uid"].split()[0]) == uid and not fields["State"].strip().startswith("Z"):
            found.append(int(name))
    return found


@pytest.mark.timeout(120)
async def test_children_started_ahead_never_displace_the_interpreter_of_a_running_execution(
) -> None:
    # Four interpreters at most, one kept ready: once three executions hold theirs, a fourth
    # takes the ready one, and none is left to start another in without ending one of theirs.
    tool = PythonTool(max_children=1, warm=1, idle_s=60.0)
    await tool.start()
    pid = "import os\nresult = os.getpid()"
    try:
        first = {}
        for execution in ("a", "b", "c", "d"):  # each takes the one ready, started after the last

            async def one_ready() -> None:
                assert tool.ready == 1

            await assert_eventually(one_ready, timeout_s=30)
            first[execution] = (await tool.run(_step(execution, pid))).result
        again = {e: (await tool.run(_step(e, pid))).result for e in ("a", "b", "c", "d")}
    finally:
        await tool.close()
    assert len(set(first.values())) == 4  # one interpreter per execution
    assert again == first  # each kept its own: none ended to make room for a fresh one
