"""Part of the `python` tool's child (tools/python_runner.py): the fork server.

It never runs user code: per order from the worker (tools/python_forks.py) it forks a fresh
child, which takes its own session, folder, environment and user before it serves steps.
"""

from __future__ import annotations

import gc
import io
import os
import struct
import traceback
from typing import TypedDict

from .python_runner_code import forget_compiled
from .python_runner_protocol import serve, serve_fds
from .python_runner_user import (
    IMPORT_LISTS,
    become,
    change_user,
    close_to_same_user,
    hold_import_dirs,
    import_dirs,
    prctl,
)
from .python_runner_values import dumps, loads


class ForkOrder(TypedDict, total=False):
    """A fork server's order (tools/python_forks.py writes it): fork a child in `cwd` with `env`
    as user `uid` (None: the server's own), or `clear` what that uid left running.
    """

    cwd: str | None
    env: dict[str, str]
    clear: bool
    uid: int | None
    gid: int
    exclusive: bool


def _forked(order: ForkOrder, channel: int, held: dict[str, int]) -> None:
    """A fork server's child: its own session, its channel as fd 0 and 1, its folder and
    environment, then its user; it serves steps until its channel closes.
    """
    import signal

    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.setsid()
    cwd, uid = order.get("cwd"), order.get("uid")
    if order.get("clear"):  # only there to kill what the uid left running: its user alone changes
        os.close(channel)
        if uid is not None:
            change_user(int(uid), int(order["gid"]), bool(order.get("exclusive")))
        return
    os.dup2(channel, 0)
    os.dup2(channel, 1)
    os.close(channel)
    if cwd:
        os.chdir(cwd)
    _set_environment(order.get("env") or {})
    if uid is None:
        prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL: it dies with the fork server
        for fd in held.values():
            os.close(fd)
    else:
        become(int(uid), int(order["gid"]), bool(order.get("exclusive")), held)
    serve_fds()


def _set_environment(env: dict[str, str]) -> None:
    """Exactly `env`, changing only what differs (most names are the fork server's already)."""
    for name in [name for name in os.environ if name not in env]:
        del os.environ[name]
    for name, value in env.items():
        if os.environ.get(name) != value:
            os.environ[name] = value


def _warm_up() -> None:
    """Constant code served before the first fork: children share what a first step sets up."""
    framed = [dumps({"code": code, "input": {"prev": 0}, "context": {"args": {"prev": 0}}})
              for code in ("result = {'i': prev + 1}", "def main(prev):\n    return prev\n")]
    serve(io.BytesIO(b"".join(struct.pack(">I", len(data)) + data for data in framed)), io.BytesIO())
    forget_compiled()  # no user code ran here, and a child holds only its own code


def fork_server() -> None:
    """Never runs user code: forks a fresh child per order from the worker (a JSON order and
    the child's channel on a SOCK_SEQPACKET socket at fd 0) and answers with its pid and a
    pidfd. Children start with the runner already imported, in a millisecond or two.
    """
    import signal
    import socket

    control = socket.socket(fileno=os.dup(0))
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL: it dies with the worker
    close_to_same_user()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the children
    held = hold_import_dirs() if os.geteuid() == 0 else {}
    IMPORT_LISTS.extend(import_dirs() if held else [])
    _warm_up()
    while True:
        data, fds, _, _ = socket.recv_fds(control, 1 << 16, 1)
        if not data:
            return
        order = loads(data)
        # What the server holds is never collected in a child: a collection there would touch
        # every object and copy the pages the child shares with the server.
        gc.freeze()
        pid = os.fork()
        if pid == 0:
            try:
                control.close()
                _forked(order, fds[0], held)
            except BaseException:  # reported on stderr; the worker sees the channel close
                traceback.print_exc()
            finally:
                os._exit(0)
        os.close(fds[0])
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:  # gone already: the worker sees its channel closed
            socket.send_fds(control, [struct.pack(">i", pid)], [])
            continue
        socket.send_fds(control, [struct.pack(">i", pid)], [pidfd])
        os.close(pidfd)
