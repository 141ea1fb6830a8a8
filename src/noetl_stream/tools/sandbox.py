"""How python children are started so that user code cannot reach what the worker holds.

A python step is code written by whoever may start an execution (a NATS `client`, an API user).
Its child process gets:

- **A clean environment**: only the names Python needs to run (`PATH`, the locale, `TZ`,
  `TMPDIR`, `PYTHONPATH`/`PYTHONHOME`, the CA bundle names) and those an operator lists in
  `NOETL_STREAM_PYTHON_ENV`; `HOME` is the worker's, or the child's own folder when it runs as
  another user. Never `NOETL_STREAM_SECRET_KEY`, the NATS password or anything else the
  worker was started with.
- **Its own session** (`setsid`): no signal aimed at the worker's process group or terminal
  reaches it, and it is killed when the worker dies (`PR_SET_PDEATHSIG`).
- **A uid of its own when the worker runs as root** (tools/python_slots.py): no other child,
  of this execution or another, shares it while it lives, and what an earlier holder left
  (processes, files) is gone before it starts; no supplementary groups, a private folder as
  HOME and TMPDIR. Such a child can neither signal the worker or another child nor read their
  `/proc/<pid>/environ`, memory or files. The interpreter starts as root and the runner changes
  its user before it reads any code (`runner_args`), keeping handles on the folders imports
  search: so it runs wherever the interpreter and its libraries are installed, a folder only
  root may enter included. `NOETL_STREAM_PYTHON_USER` names one user for all children instead
  (they can then reach each other), `-` keeps the worker's; a child that stays root holds no
  capability, so the non-dumpable worker's /proc files stay closed to it.
- **Non-dumpable** (the runner sets it before any code runs): a process of the same uid cannot
  read its memory or environment under /proc, nor ptrace it.

A worker that is not root cannot change the child's user: the child can still signal the worker
(same uid) and read files the worker's user can read. The worker then makes itself non-dumpable
(`protect_worker_process`), so its memory and environment under /proc are closed to the child;
docs/security.md says what holds in each case.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import pwd
import shutil
import signal
import sys
import tempfile
from collections.abc import Callable, Set
from dataclasses import dataclass, field

from noetl_stream.tools.python_slots import (
    DEFAULT_UIDS,
    ENV_PYTHON_UIDS,
    SandboxUser,
    SlotError,
    UidSlots,
    clear_slots,
    missing_capabilities,
    parse_range,
)

log = logging.getLogger("noetl_stream.python_sandbox")

ENV_PYTHON_USER = "NOETL_STREAM_PYTHON_USER"
ENV_PYTHON_ENV = "NOETL_STREAM_PYTHON_ENV"
ENV_PYTHON_EXECUTABLE = "NOETL_STREAM_PYTHON_EXECUTABLE"
DEFAULT_SANDBOX_USER = "nobody"
# `NOETL_STREAM_PYTHON_USER=-`: the operator chooses to run children as the worker's own user.
SAME_USER = "-"

# What an interpreter needs to start, find its modules and speak the locale; none is a secret.
PASSED_NAMES = frozenset({
    "PATH", "LANG", "LANGUAGE", "TZ", "TMPDIR", "PYTHONPATH", "PYTHONHOME", "SSL_CERT_FILE",
    "SSL_CERT_DIR"})
PASSED_PREFIXES = ("LC_",)
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"

_PR_SET_PDEATHSIG = 1
_PR_SET_DUMPABLE = 4
_PR_CAPBSET_DROP = 24
_PR_SET_NO_NEW_PRIVS = 38


@dataclass(frozen=True)
class ChildPlace:
    """Where one child runs: its user, its private folder (its HOME and TMPDIR), environment."""

    user: SandboxUser | None
    folder: str | None
    env: dict[str, str]
    # A child that stays root (no user could run the interpreter, or the operator chose the
    # worker's user) keeps uid 0 but no capability: the worker is non-dumpable, so its
    # /proc/<pid>/environ and mem need CAP_SYS_PTRACE, which such a child never has. The
    # highest capability number to drop, -1 for none (read by open_place, off the event loop).
    last_capability: int = -1

    def runner_args(self) -> list[str]:
        """What the runner is told after its code: the user it becomes before it reads any code
        (it starts as root, so an interpreter in a folder only root may enter still runs).
        """
        user = self.user
        if user is None:
            return []
        return [str(user.uid), str(user.gid), "exclusive" if user.exclusive else "shared"]

    def preexec(self) -> Callable[[], None] | None:
        """Runs in a child that stays the worker's user, between fork and exec: with a root
        worker, an empty capability bounding set (exec then grants none); the death signal.
        None for a child of another user: the runner changes it and sets its own death signal
        (the kernel clears it when the user changes), and no python code runs in the fork.
        """
        if self.user is not None:
            return None
        libc = _libc()
        last_cap = self.last_capability

        def setup() -> None:
            if libc is not None:
                for cap in range(last_cap + 1):  # empty bounding set: exec grants none
                    libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)
                if last_cap >= 0:
                    libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
                libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)

        return setup


@functools.cache
def _last_capability() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return 40


@dataclass
class Sandbox:
    """Everything `_Child.spawn` needs: interpreter, environment, and who children run as: a
    uid of their own each (`slots`, a root worker's default), one named user, or the worker's.
    """

    executable: str
    env: dict[str, str]
    user: SandboxUser | None = None
    extra: list[str] = field(default_factory=list)
    slots: UidSlots | None = None

    @property
    def other_user(self) -> str | None:
        """Whom children run as when it is not the worker's user (for messages), else None."""
        if self.slots is not None:
            return f"uids of {ENV_PYTHON_UIDS}"
        return self.user.name if self.user is not None else None

    @property
    def place_free(self) -> bool:
        """Whether `take_user` has a user to give now (a slot uid is busy until cleared)."""
        return self.slots is None or self.slots.free > 0

    def take_user(self) -> SandboxUser | None:
        """The user of one new child: a slot's uid of its own (SlotError when every one is in
        use or being cleared), else the one user, or None for the worker's. Never blocks.
        """
        return self.slots.take() if self.slots is not None else self.user

    def open_place(self, user: SandboxUser | None) -> ChildPlace:
        """A place for one new child of `user` (`take_user`; blocking: it makes a folder)."""
        if user is None:
            return ChildPlace(None, None, self.env,
                              _last_capability() if os.geteuid() == 0 else -1)
        try:
            folder = tempfile.mkdtemp(prefix=f"noetl-python-{user.uid}-")
            try:
                os.chown(folder, user.uid, user.gid)
                os.chmod(folder, 0o700)
            except BaseException:
                shutil.rmtree(folder, ignore_errors=True)
                raise
        except BaseException:
            if user.exclusive and self.slots is not None:
                self.slots.give_back(user)  # no child ran as it: nothing to clear
            raise
        env = {**self.env, "HOME": folder, "TMPDIR": folder, "USER": user.name,
               "LOGNAME": user.name}
        return ChildPlace(user, folder, env)

    def close_place(self, place: ChildPlace, *, processes_cleared: bool = False) -> None:
        """After the child is gone (blocking): its folder, and a slot's leftovers, go
        (`processes_cleared`: its processes are already killed).
        """
        killed = {place.user} if processes_cleared and place.user is not None else set()
        self.close_places([place], killed=killed)

    def close_places(self, places: list[ChildPlace], *, killed: Set[SandboxUser]) -> None:
        """After their children are gone (blocking): their folders, and the leftovers of their
        slots, go (the shared folders are read once for all); only then are the slots' uids
        free for other children, each once root finds none of its processes left (a uid
        with some after that is retired). `killed`: users whose processes are already killed.
        """
        for place in places:
            if place.folder is not None:
                shutil.rmtree(place.folder, ignore_errors=True)
        if self.slots is None:
            return
        users = [p.user for p in places if p.user is not None and p.user.exclusive]
        stuck = clear_slots(users, kill=[user for user in users if user not in killed])
        for user in users:
            if user.uid in stuck:
                log.error("python uid %d is retired: its processes outlived SIGKILL", user.uid)
            else:
                self.slots.give_back(user)

    @property
    def forks(self) -> bool:
        """Whether children may come from a fork server: not when they stay a root worker's
        user, whose capabilities only an exec with an empty bounding set takes away.
        """
        return self.user is not None or self.slots is not None or os.geteuid() != 0

    def close(self) -> None:
        if self.slots is not None:
            self.slots.close()


@functools.cache
def _libc() -> ctypes.CDLL | None:
    """libc, found among the symbols this process already has: find_library would run
    `ldconfig -p` as a child process, on the event loop, for every python child spawned.
    """
    if not sys.platform.startswith("linux"):
        return None
    return ctypes.CDLL(None, use_errno=True)


def protect_worker_process() -> bool:
    """Make this process non-dumpable: /proc/<pid>/environ, mem and fd are then closed to
    other processes of the same user (python children when the worker cannot change their
    user), and so is ptrace. Returns whether it took effect.
    """
    libc = _libc()
    if libc is None:
        return False
    return bool(libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) == 0)


def clean_environment(source: dict[str, str], *, home: str | None,
                      extra_names: list[str]) -> dict[str, str]:
    """The child's environment: the names Python needs, those the operator allows, and HOME."""
    env = {k: v for k, v in source.items()
           if k in PASSED_NAMES or k.startswith(PASSED_PREFIXES) or k in extra_names}
    env.setdefault("PATH", SAFE_PATH)
    env.setdefault("LANG", "C.UTF-8")
    if home:
        env["HOME"] = home
    return env


def _extra_names(source: dict[str, str]) -> list[str]:
    raw = source.get(ENV_PYTHON_ENV, "")
    return [n.strip() for n in raw.replace(",", " ").split() if n.strip()]


def sandbox_user(source: dict[str, str]) -> SandboxUser | None:
    """The one user every child runs as: None when the worker is not root (it could not change
    it), the operator chose `-`, or named nobody (then each child gets a uid of its own);
    else NOETL_STREAM_PYTHON_USER (a name or a uid).
    """
    wanted = source.get(ENV_PYTHON_USER, "").strip()
    if os.geteuid() != 0 or not wanted or wanted == SAME_USER:
        return None
    try:
        entry = pwd.getpwuid(int(wanted)) if wanted.isdigit() else pwd.getpwnam(wanted)
    except (KeyError, ValueError):
        raise SandboxError(f'{ENV_PYTHON_USER}="{wanted}": no such user on this machine; name '
                           f'a user (or uid) for python steps, or "{SAME_USER}" to run them as '
                           "the worker's own user") from None
    if entry.pw_uid == 0:
        raise SandboxError(f'{ENV_PYTHON_USER}="{wanted}" is root; python steps must not run '
                           f'as root (use "{SAME_USER}" to keep the worker\'s user knowingly)')
    return SandboxUser(entry.pw_name, entry.pw_uid, entry.pw_gid)


def _holds_slot_capabilities(source: dict[str, str]) -> bool:
    """Whether this root worker holds what slot uids need (python_slots.WORKER_CAPABILITIES).
    Without them, uids the operator set are an error; by default children stay the worker's
    user, without capabilities, with a warning naming what is missing.
    """
    missing = missing_capabilities()
    if not missing:
        return True
    problem = (f"the worker runs as root without {', '.join(missing)}, which giving each python "
               "step a uid of its own needs (docs/security.md)")
    if source.get(ENV_PYTHON_UIDS, "").strip():
        raise SandboxError(f"{ENV_PYTHON_UIDS} is set but {problem}")
    log.warning("python steps run as root: %s", problem)
    return False


class SandboxError(Exception):
    """The python sandbox cannot be set up as configured; the worker does not start."""


def make_sandbox(source: dict[str, str] | None = None, *, same_user: bool = False,
                 slots: int = 0) -> Sandbox:
    """The sandbox for this worker's python children, from its environment (`same_user`: keep
    the worker's user whatever the settings say; `slots`: how many uids a root worker claims
    for children of their own, when no single user is named).
    """
    source = dict(os.environ if source is None else source)
    executable = source.get(ENV_PYTHON_EXECUTABLE) or sys.executable
    extra = _extra_names(source)
    if same_user:
        return Sandbox(executable, clean_environment(source, home=source.get("HOME"),
                                                     extra_names=extra), None, extra)
    user = sandbox_user(source)
    env = clean_environment(source, home=None, extra_names=extra)
    if user is not None:
        return Sandbox(executable, env, user, extra)
    if os.geteuid() == 0 and source.get(ENV_PYTHON_USER, "").strip() != SAME_USER and slots > 0 \
            and _holds_slot_capabilities(source):
        uids = parse_range(source.get(ENV_PYTHON_UIDS, "") or DEFAULT_UIDS)
        try:
            return Sandbox(executable, env, None, extra, UidSlots(uids, slots))
        except SlotError as exc:
            raise SandboxError(str(exc)) from None
    return Sandbox(executable, clean_environment(source, home=source.get("HOME"),
                                                 extra_names=extra), None, extra)
