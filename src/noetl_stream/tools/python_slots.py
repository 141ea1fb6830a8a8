"""One uid per python child under a root worker, so steps of different executions can neither
signal each other nor read each other's memory, environment or files.

A root worker claims uids from NOETL_STREAM_PYTHON_UIDS (`FIRST-LAST`, default 59000-59999;
uids with no account, each used with the group of the same number) through lock files in a
folder only root may write (`flock`): two workers on one machine never share one, and a worker
that dies frees its claims with its file descriptors. A child runs as its slot's uid alone. When
a slot changes hands, whatever the last child left behind as that uid is removed: its processes
(a daemon it forked) are killed before the next child's code starts, and the files it left in
the world-writable folders are deleted, so nothing passes from one execution to the next.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pwd
import shutil
import stat
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from noetl_stream.tools.python_sweep import sweep

ENV_PYTHON_UIDS = "NOETL_STREAM_PYTHON_UIDS"
DEFAULT_UIDS = "59000-59999"
LOCK_DIRS = ("/run/noetl-stream/python-uids", f"{tempfile.gettempdir()}/noetl-stream-python-uids")
# Where any uid may create files; a slot's leftovers there go when the slot changes hands.
SHARED_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm", "/dev/mqueue")
# What a root worker does as root for its slots, and so the capability bounding set the shipped
# deployments give it, no more (docs/security.md): change a child's user (SETUID, SETGID), signal
# a child of another uid (KILL), hand a child its folder (CHOWN, then FOWNER to set the mode of
# a folder it no longer owns and to remove it from the sticky /tmp), and remove what a slot left
# in its folder, however the child set the modes (DAC_OVERRIDE).
WORKER_CAPABILITIES = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL", "SETGID", "SETUID")
_CAPABILITY_BITS = {"CHOWN": 0, "DAC_OVERRIDE": 1, "FOWNER": 3, "KILL": 5, "SETGID": 6,
                    "SETUID": 7}  # linux/capability.h
# kill(-1) succeeds whenever any other process exists (those it may not signal included), so it
# cannot tell when the uid has none left; it need not: a process whose fork is under way when
# SIGKILL reaches it never gets its child (the kernel aborts the fork), so one round leaves the
# uid nothing that can run again. The spare rounds cost a walk of the process table each.
KILL_ROUNDS = 3


class SlotError(Exception):
    """The uid range is malformed or exhausted; the worker does not start."""


@dataclass(frozen=True)
class SandboxUser:
    """The user a python child runs as (None: the worker's own user). `exclusive`: the uid is
    this child's alone (a slot), so every other process of it is a leftover to kill.
    """

    name: str
    uid: int
    gid: int
    exclusive: bool = False


def parse_range(text: str) -> range:
    first, sep, last = text.strip().partition("-")
    try:
        low, high = int(first), int(last if sep else first)
    except ValueError:
        raise SlotError(f'{ENV_PYTHON_UIDS}="{text}": expected FIRST-LAST, e.g. {DEFAULT_UIDS}') \
            from None
    if low <= 0 or high < low:
        raise SlotError(f'{ENV_PYTHON_UIDS}="{text}": uids must be above 0 (root), FIRST <= LAST')
    return range(low, high + 1)


def _lock_dir() -> Path:
    """A folder of root's that no one else can write, for the claim files."""
    for candidate in LOCK_DIRS:
        folder = Path(candidate)
        with contextlib.suppress(OSError):
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            info = folder.lstat()
            if stat.S_ISDIR(info.st_mode) and info.st_uid == 0 and not info.st_mode & 0o022:
                return folder
    raise SlotError(f"no private folder for python uid claims (tried {', '.join(LOCK_DIRS)})")


def keep_sticky(folders: tuple[str, ...]) -> None:
    """Set the sticky bit on each world-writable folder that lacks it: without it, one slot uid
    may rename or delete what another left there (a Kubernetes emptyDir /tmp is 0777, not 1777).
    """
    for name in folders:
        with contextlib.suppress(OSError):
            mode = os.stat(name).st_mode
            if stat.S_ISDIR(mode) and mode & stat.S_IWOTH and not mode & stat.S_ISVTX:
                os.chmod(name, stat.S_IMODE(mode) | stat.S_ISVTX)


class UidSlots:
    """The uids this worker claimed; `take` one per child, `give_back` when the child is gone."""

    def __init__(self, uids: range, count: int) -> None:
        keep_sticky(SHARED_WRITABLE)
        folder = _lock_dir()
        self._claims: dict[int, int] = {}
        for uid in uids:
            if len(self._claims) == count:
                break
            if _has_account(uid):
                continue  # someone's real user: never run strangers' code as it
            fd = os.open(folder / str(uid), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            self._claims[uid] = fd
        if len(self._claims) < count:
            self.close()
            raise SlotError(f"only {len(self._claims)} free uids in {uids.start}-{uids.stop - 1} "
                            f"for {count} python processes: widen {ENV_PYTHON_UIDS}")
        self._free = sorted(self._claims, reverse=True)

    @property
    def free(self) -> int:
        """Uids no child holds and none is being cleared: what `take` may hand out now."""
        return len(self._free)

    def take(self) -> SandboxUser:
        if not self._free:
            raise SlotError("every python uid is in use or being cleared")
        uid = self._free.pop()
        return SandboxUser(f"noetl-python-{uid}", uid, uid, exclusive=True)

    def give_back(self, user: SandboxUser) -> None:
        self._free.append(user.uid)

    def close(self) -> None:
        for fd in self._claims.values():
            os.close(fd)
        self._claims.clear()


def _has_account(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True


# Run as the slot's uid: `kill -9 -1` reaches exactly the processes this uid may signal, never
# the shell itself (KILL_ROUNDS says why so few rounds).
_KILL_ALL = f"for i in {' '.join(['1'] * KILL_ROUNDS)}; do kill -9 -1 2>/dev/null; done"


def clear_slots(users: list[SandboxUser], *, kill: list[SandboxUser]) -> set[int]:
    """What the slots' last children left behind: the processes of the uids in `kill` (the
    others' are killed already, tools/python_forks.py), then, as root, whatever process of
    any uid in `users` outlived that (tools/python_sweep.py), then their files in the shared
    folders, read once for all. The uids whose processes outlived even root's SIGKILL, which
    must not be handed out again. Blocking (run it in a thread). The user change is made by
    subprocess itself, in C: python code between fork and exec is unsafe in a process with
    threads.
    """
    shell = shutil.which("sh") or "/bin/sh"
    for user in kill:
        subprocess.run([shell, "-c", _KILL_ALL], user=user.uid, group=user.gid,
                       extra_groups=[],
                       check=False, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, env={"PATH": "/usr/bin:/bin"})
    uids = frozenset(user.uid for user in users)
    if not uids:
        return set()
    # Before the files: a leftover that won its race against kill(-1) could write more.
    stuck = sweep(uids) if os.geteuid() == 0 else set()
    for shared in SHARED_WRITABLE:
        with contextlib.suppress(OSError), os.scandir(shared) as entries:
            for entry in entries:
                _remove_if_owned(entry, uids)
    return stuck


def _remove_if_owned(entry: os.DirEntry[str], uids: frozenset[int]) -> None:
    with contextlib.suppress(OSError):
        info = entry.stat(follow_symlinks=False)
        if info.st_uid not in uids:
            return
        if stat.S_ISDIR(info.st_mode):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            os.unlink(entry.path)


def missing_capabilities(effective: int | None = None) -> list[str]:
    """The WORKER_CAPABILITIES this process does not hold (`effective`: a CapEff mask, by
    default this process's own from /proc/self/status).
    """
    if effective is None:
        effective = _effective_capabilities()
    return [f"CAP_{name}" for name in WORKER_CAPABILITIES
            if not effective >> _CAPABILITY_BITS[name] & 1]


def _effective_capabilities() -> int:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("CapEff:"):
                    return int(line.split()[1], 16)
    except (OSError, ValueError, IndexError):
        pass
    return -1  # unknown: assume all, as a root process holds them unless told otherwise
