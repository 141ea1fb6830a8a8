"""The root side of clearing a slot: what its uid still runs is found in /proc and killed.

A slot's processes are first killed by kill(-1) from a process of the slot's own uid
(tools/python_runner_user.py, tools/python_slots.py). A process the last holder left running can
defeat that: looping kill(-1) itself, it kills every new process of the uid, the clearing one
among them, before that one's own kill(-1). A root worker therefore looks for itself: every
process whose real, effective or saved uid is the slot's is sent SIGKILL, and /proc is read
again until no such process is alive. A process killed cannot fork again (the kernel aborts a
fork under way), so each round leaves only what was forked during the scan before it, and the
rounds end; SWEEP_ROUNDS bounds them should a process stay (one stuck in the kernel, say).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterator, Set

SWEEP_ROUNDS = 50
_PAUSE_S = 0.001  # between rounds once the first few did not end it: a killed process exits


def processes_of(uids: Set[int]) -> dict[int, int]:
    """The live processes (pid: uid) whose real, effective or saved uid is one of `uids`;
    dead ones are left out (they run nothing and their parent reaps them).
    """
    found: dict[int, int] = {}
    for pid in _pids():
        uid = _uid_of(pid, uids)
        if uid is not None:
            found[pid] = uid
    return found


def sweep(uids: Set[int]) -> set[int]:
    """SIGKILL every process of `uids` until a scan finds none alive; the uids that still have
    processes after SWEEP_ROUNDS (empty: every one is cleared). Needs CAP_KILL over those uids.
    """
    if not uids:
        return set()
    for round_ in range(SWEEP_ROUNDS):
        found = processes_of(uids)
        if not found:
            return set()
        for pid in found:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if round_ >= 2:
            time.sleep(_PAUSE_S * min(round_, 20))
    return set(processes_of(uids).values())


def _pids() -> Iterator[int]:
    with contextlib.suppress(OSError), os.scandir("/proc") as entries:
        for entry in entries:
            if entry.name.isdigit():
                yield int(entry.name)


def _uid_of(pid: int, uids: Set[int]) -> int | None:
    """The one of `uids` process `pid` runs as (real, effective or saved), or None: not one of
    them, dead (a zombie whose threads all ended), or gone already.
    """
    try:
        with open(f"/proc/{pid}/status", "rb") as status:
            text = status.read()
    except OSError:  # gone meanwhile
        return None
    ours = [uid for uid in map(int, _field(text, b"Uid").split()[:3]) if uid in uids]
    if not ours:
        return None
    # A leader that ended shows as a zombie while its other threads still run: not dead.
    if _field(text, b"State")[:1] in (b"Z", b"X") and _field(text, b"Threads") in (b"", b"1"):
        return None
    return ours[0]


def _field(status: bytes, name: bytes) -> bytes:
    """The value of `name` in a /proc status text (b"" when absent)."""
    start = status.find(b"\n" + name + b":")
    if start < 0:
        return b""
    start += len(name) + 2
    end = status.find(b"\n", start)
    return status[start : end if end >= 0 else len(status)].strip()
