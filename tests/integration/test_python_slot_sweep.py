"""A slot's leftovers cannot outlive its clearing (tools/python_sweep.py): a python step that
leaves a daemon of its slot's uid killing every new process of that uid, the clearing one
among them, does not make the steps of the executions handed that slot after it fail; root's
sweep kills a uid's processes that keep forking or whose main thread ended; and a uid whose
processes outlive the sweep is not handed out again."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import platform
import signal
import threading
import time
from collections.abc import Iterator

import pytest

from noetl_stream.testing.waiting import assert_eventually
from noetl_stream.tools import python as python_tool_module
from noetl_stream.tools import python_sweep
from noetl_stream.tools.base import TaskCall
from noetl_stream.tools.python import PythonTool
from noetl_stream.tools.python_sweep import processes_of, sweep
from noetl_stream.tools.sandbox import make_sandbox

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(os.geteuid() != 0, reason="slot uids need a root worker")]

# Uids no account has, apart from those other tests claim.
TEST_UIDS = range(3_999_980_300, 3_999_980_310)

# A daemon (double fork, own session, no inherited files) that kills every other process of
# its uid over and over; the step's own interpreter ends right after.
KILLER = """\
import os, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.closerange(0, 1 << 16)
        while True:
            try:
                os.kill(-1, 9)
            except OSError:
                pass
    os._exit(0)
time.sleep(0.3)
os._exit(3)
"""
# The daemon wins its race against a new process's own kill(-1) only now and then.
ROUNDS = 12
UID = "import os\nresult = os.getuid()\n"


def _step(execution_id: str, code: str) -> TaskCall:
    return TaskCall(execution_id=execution_id, step="s", task="t", kind="python",
                    config={"code": code}, input={}, spec={},
                    idempotency_key=f"{execution_id}.s.1:None:t:1")


def _kill_test_uids() -> None:
    """What a failed run left of the test's uids (the test itself is root)."""
    for pid in processes_of(set(TEST_UIDS)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture
def one_uid(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("NOETL_STREAM_PYTHON_UIDS", f"{TEST_UIDS.start}-{TEST_UIDS.stop - 1}")
    try:
        yield
    finally:
        _kill_test_uids()


@pytest.mark.timeout(180)
async def test_a_daemon_killing_its_uid_does_not_outlive_the_slots_clearing(
        one_uid: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(python_tool_module, "CLEAR_WAIT_S", 0.0)
    sandbox = await asyncio.to_thread(make_sandbox, slots=1)  # every child on the same uid
    assert sandbox.slots is not None
    tool = PythonTool(max_children=1, warm=0, idle_s=0.5, sandbox=sandbox)
    await tool.start()
    slot_uid = None
    try:
        for n in range(ROUNDS):
            planted = await tool.run(_step(f"a{n}", KILLER))
            assert planted.error is not None and planted.error["kind"] == "crash"
            outcome = await asyncio.wait_for(tool.run(_step(f"b{n}", UID)), 60)
            assert outcome.ok, f"round {n}: {outcome.error}"
            slot_uid = outcome.result
            assert isinstance(slot_uid, int) and slot_uid in TEST_UIDS
            # the slot the daemon was left in: nothing of it runs but b's interpreter
            assert len(await asyncio.to_thread(processes_of, {slot_uid})) == 1, f"round {n}"
    finally:
        await tool.close()
    assert slot_uid is not None

    async def nothing_left() -> None:
        assert await asyncio.to_thread(processes_of, {slot_uid}) == {}

    await assert_eventually(nothing_left, timeout_s=5)


def _fork_forever(uid: int) -> None:
    """As `uid`, fork children that sleep, as fast as it can, until killed."""
    os.setsid()
    os.setgroups([])
    os.setresgid(uid, uid, uid)
    os.setresuid(uid, uid, uid)
    while True:
        try:
            if os.fork() == 0:
                time.sleep(60)
                os._exit(0)
        except OSError:
            time.sleep(0.01)


def test_a_sweep_kills_every_process_of_a_uid_however_it_forks() -> None:
    uid = TEST_UIDS.stop - 1
    pid = os.fork()
    if pid == 0:
        try:
            _fork_forever(uid)
        finally:
            os._exit(1)
    try:
        for _ in range(500):  # until it has forked a few
            if len(processes_of({uid})) >= 5:
                break
            time.sleep(0.01)
        assert len(processes_of({uid})) >= 5
        assert sweep({uid}) == set()
        assert processes_of({uid}) == {}
    finally:
        _kill_test_uids()
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)


SYS_EXIT = {"x86_64": 60, "aarch64": 93}  # exit(2): ends the calling thread alone


def _live_on_in_a_thread(uid: int) -> None:
    """As `uid`, end the main thread while another one runs on: its /proc entry is a zombie's."""
    os.setresuid(uid, uid, uid)
    threading.Thread(target=time.sleep, args=(60,)).start()
    ctypes.CDLL(None).syscall(SYS_EXIT[platform.machine()], 0)


def test_a_sweep_kills_a_process_whose_main_thread_ended(one_uid: None) -> None:
    uid = TEST_UIDS.stop - 2
    pid = os.fork()
    if pid == 0:
        try:
            _live_on_in_a_thread(uid)
        finally:
            os._exit(1)
    try:
        for _ in range(500):  # until its main thread has ended
            with open(f"/proc/{pid}/status", "rb") as status:
                if b"State:\tZ" in status.read():
                    break
            time.sleep(0.01)
        assert pid in processes_of({uid})
        assert sweep({uid}) == set()
        assert processes_of({uid}) == {}
    finally:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def test_a_uid_whose_processes_outlive_the_sweep_is_not_handed_out_again(
        one_uid: None, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    # What outlives every round (a process stuck in the kernel) cannot be made on demand, and
    # processes made as fast as the rounds kill them make a race the load decides. So the
    # rounds are spent before the first (SWEEP_ROUNDS 0): the sweep reads /proc once, finds
    # the uid's process alive, and the uid must be retired.
    monkeypatch.setattr(python_sweep, "SWEEP_ROUNDS", 0)
    sandbox = make_sandbox(slots=2)
    assert sandbox.slots is not None
    try:
        user = sandbox.take_user()
        assert user is not None
        place = sandbox.open_place(user)
        left = os.fork()
        if left == 0:
            try:
                os.setresuid(user.uid, user.uid, user.uid)
                time.sleep(60)
            finally:
                os._exit(1)
        try:
            for _ in range(500):  # until it runs as the uid
                if left in processes_of({user.uid}):
                    break
                time.sleep(0.01)
            assert left in processes_of({user.uid})
            with caplog.at_level("ERROR", logger="noetl_stream.python_sandbox"):
                # Its own kill(-1) is skipped (`killed`): the sweep alone decides.
                sandbox.close_places([place], killed={user})
        finally:
            os.kill(left, signal.SIGKILL)
            os.waitpid(left, 0)
            _kill_test_uids()
        assert f"python uid {user.uid} is retired" in caplog.text
        other = sandbox.take_user()
        assert other is not None and other.uid != user.uid
        assert not sandbox.place_free  # the retired uid is not among those free
    finally:
        sandbox.close()
