"""Part of the `python` tool's child (tools/python_runner.py): the process it runs as.

Started as root (so it could read an interpreter in a private folder), a child becomes its slot's
user before it reads any code, and keeps reaching the folders imports search through handles
taken before the change. Linux calls (prctl) through libc, loaded once before any user change.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any

_LIBC: list[Any] = []  # libc, loaded once (before any user change); forks inherit it


def _libc() -> Any:
    if not _LIBC:
        import ctypes  # only here: start-up imports nothing unused
        _LIBC.append(ctypes.CDLL(None))
    return _LIBC[0]


def prctl(option: int, value: int) -> None:
    _libc().prctl(option, value, 0, 0, 0)


def close_to_same_user() -> None:
    """Non-dumpable: another process of this uid (a child of another execution, when the worker
    cannot give each its own) can then neither read our memory and environment under /proc nor
    ptrace us. Linux only; elsewhere nothing to do.
    """
    if sys.platform.startswith("linux"):
        prctl(4, 0)  # PR_SET_DUMPABLE, 0


def import_dirs() -> list[list[str]]:
    """The lists of folders imports search: sys.path and every loaded package's __path__."""
    lists: list[list[str]] = [sys.path]
    for module in list(sys.modules.values()):
        found = getattr(module, "__path__", None)
        if isinstance(found, list):
            lists.append(found)
    return lists


def hold_import_dirs() -> dict[str, int]:
    """As root, before the user changes: a handle on every folder imports search, for those the
    new user cannot reach by name (a virtualenv under a private folder such as /root).
    """
    held: dict[str, int] = {}
    for dirs in import_dirs():
        for folder in dirs:
            if folder and folder not in held:
                with contextlib.suppress(OSError):
                    held[folder] = os.open(folder, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    return held


IMPORT_LISTS: list[list[str]] = []  # read once by a fork server: in a fork, a module read is a page copied


def _reach_import_dirs(held: dict[str, int]) -> None:
    """As the new user: a folder it cannot reach by name is searched through its handle
    (`/proc/self/fd/N`: the kernel then checks the folder itself, not the private ones above it).
    """
    through: dict[str, str] = {}
    for folder, fd in held.items():
        if os.access(folder, os.R_OK | os.X_OK):
            os.close(fd)
        else:
            through[folder] = f"/proc/self/fd/{fd}"
    if through:
        for dirs in IMPORT_LISTS or import_dirs():
            if any(folder in through for folder in dirs):
                dirs[:] = [through.get(folder, folder) for folder in dirs]
        sys.path_importer_cache.clear()


KILL_ROUNDS = 3  # tools/python_slots.py KILL_ROUNDS says why so few


def _kill_leftovers() -> None:
    """Every other process of this uid is what an earlier holder of the slot left running:
    kill(-1) reaches exactly the processes this uid may signal, never the caller itself. It
    succeeds whenever any process exists, so its answer cannot end the rounds early; one round
    suffices (a fork under way when SIGKILL comes is aborted), each walks the process table.
    """
    for _ in range(KILL_ROUNDS):
        try:
            os.kill(-1, 9)
        except ProcessLookupError:  # no other process on the machine at all
            return


def become(uid: int, gid: int, exclusive: bool, held: dict[str, int] | None = None) -> None:
    """Started as root (so it could read an interpreter in a private folder), the runner becomes
    its slot's user before it reads any code: no groups, no capability, nothing of the earlier
    holder left running, killed with its parent (the kernel clears the death signal when the
    user changes, so it is set after), non-dumpable, and no way back through a setuid program.
    `exclusive`: the uid is this child's alone, so every other process of it is killed.
    """
    held = hold_import_dirs() if held is None else held
    change_user(uid, gid, exclusive)
    _reach_import_dirs(held)


def change_user(uid: int, gid: int, exclusive: bool) -> None:
    """`become`'s change of user, all a clearing child needs (it reads no code)."""
    parent = os.getppid()
    _libc()  # loaded while its files are reachable by name
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if exclusive:  # the uid is this child's alone (a slot): any other process of it is stale
        _kill_leftovers()
    prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
    prctl(38, 1)  # PR_SET_NO_NEW_PRIVS
    if os.getppid() != parent:  # the parent died before the death signal was set
        os._exit(1)
