"""How python children are started so that user code cannot reach what the worker holds.

A python step is code written by whoever may start an execution (a NATS `client`, an API user).
Its child process gets:

- **A clean environment**: only the names Python needs to run (`PATH`, the locale, `TZ`,
  `TMPDIR`, `PYTHONPATH`/`PYTHONHOME`, the CA bundle names) and those an operator lists in
  `NOETL_STREAM_PYTHON_ENV`; `HOME` is the worker's, or the sandbox folder when the child runs
  as another user. Never `NOETL_STREAM_SECRET_KEY`, the NATS password or anything else the
  worker was started with.
- **Its own session** (`setsid`): no signal aimed at the worker's process group or terminal
  reaches it, and it is killed when the worker dies (`PR_SET_PDEATHSIG`).
- **Another user when the worker runs as root**: `NOETL_STREAM_PYTHON_USER` (default `nobody`),
  with that user's group and no supplementary groups, in a private working folder. Such a child
  can neither signal the worker nor read its `/proc/<pid>/environ` or its files.

A worker that is not root cannot change the child's user: the child can still signal the worker
(same uid) and read files the worker's user can read. The worker then makes itself non-dumpable
(`protect_worker_process`), so its memory and environment under /proc are closed to the child;
docs/security.md says what holds in each case.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import pwd
import signal
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

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


@dataclass(frozen=True)
class SandboxUser:
    """The user python children run as (None: the worker's own user)."""

    name: str
    uid: int
    gid: int


@dataclass
class Sandbox:
    """Everything `_Child.spawn` needs: interpreter, environment, folder, user."""

    executable: str
    env: dict[str, str]
    cwd: str | None = None
    user: SandboxUser | None = None
    extra: list[str] = field(default_factory=list)

    def preexec(self) -> Callable[[], None]:
        """Runs in the child between fork and exec: the user change, then the death signal
        (the kernel clears PDEATHSIG when credentials change, so it comes last).
        """
        user = self.user
        libc = _libc()

        def setup() -> None:
            if user is not None:
                os.setgroups([])
                os.setresgid(user.gid, user.gid, user.gid)
                os.setresuid(user.uid, user.uid, user.uid)
            if libc is not None:
                libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)

        return setup


def _libc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    name = ctypes.util.find_library("c")
    return ctypes.CDLL(name, use_errno=True) if name else None


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
    """The user children run as: None when the worker is not root (it could not change it) or
    the operator chose `-`; else NOETL_STREAM_PYTHON_USER (a name or a uid), default nobody.
    """
    if os.geteuid() != 0:
        return None
    wanted = source.get(ENV_PYTHON_USER, "").strip() or DEFAULT_SANDBOX_USER
    if wanted == SAME_USER:
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


class SandboxError(Exception):
    """The python sandbox cannot be set up as configured; the worker does not start."""


def make_sandbox(source: dict[str, str] | None = None, *, same_user: bool = False) -> Sandbox:
    """The sandbox for this worker's python children, from its environment (`same_user`: keep
    the worker's user whatever NOETL_STREAM_PYTHON_USER says).
    """
    source = dict(os.environ if source is None else source)
    executable = source.get(ENV_PYTHON_EXECUTABLE) or sys.executable
    user = None if same_user else sandbox_user(source)
    extra = _extra_names(source)
    if user is None:
        env = clean_environment(source, home=source.get("HOME"), extra_names=extra)
        return Sandbox(executable, env, None, None, extra)
    folder = Path(tempfile.mkdtemp(prefix=f"noetl-python-{user.name}-"))
    os.chown(folder, user.uid, user.gid)
    folder.chmod(0o700)
    env = clean_environment(source, home=str(folder), extra_names=extra)
    env["TMPDIR"] = str(folder)
    return Sandbox(executable, env, str(folder), user, extra)
