"""A fork server for python children: fresh interpreters in a millisecond or two.

Starting an interpreter and the runner costs tens of milliseconds of CPU, and every execution's
first python step needs a fresh one (tools/python.py). The fork server is the runner started
once, as the worker's user, that never runs user code: for each child the worker sends it an
order (user, folder, environment) and one end of a socket pair, and it forks; the child takes
its own session, folder, environment and user (tools/python_runner.py `become`) before it reads
a step, exactly as a started interpreter does. The worker gets a pidfd for each child: it
signals and awaits that process, never a reused pid. `clear` forks a child that only kills what
a slot's uid left running. When the fork server is gone, children are started as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import select
import signal
import socket
import struct
from typing import TypedDict

from noetl_stream import jsonutil
from noetl_stream.tools.python_slots import SandboxUser
from noetl_stream.tools.sandbox import ChildPlace, Sandbox


class ForkServerGone(Exception):
    """The fork server exited; children are started as separate interpreters instead."""


class ForkedProcess:
    """A child of the fork server, shaped like asyncio's Process where _Child uses it."""

    def __init__(self, pid: int, pidfd: int, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
        self.pid = pid
        self._pidfd = pidfd
        self.stdout = reader
        self.stdin = writer
        self._exited = False

    @property
    def returncode(self) -> int | None:
        if not self._exited and select.select([self._pidfd], [], [], 0)[0]:
            self._ended()
        return -signal.SIGKILL if self._exited else None

    def kill(self) -> None:
        if not self._exited:
            signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)

    async def wait(self) -> int | None:
        if not self._exited:
            await _readable(self._pidfd)
            self._ended()
        return self.returncode

    def _ended(self) -> None:
        self._exited = True
        os.close(self._pidfd)
        self.stdin.close()


class ForkServer:
    def __init__(self, sandbox: Sandbox, source: str) -> None:
        self._sandbox = sandbox
        self._source = source
        self._proc: asyncio.subprocess.Process | None = None
        self._control: socket.socket | None = None
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._proc = await asyncio.create_subprocess_exec(
                self._sandbox.executable, "-u", "-P", "-c", self._source, "fork-server",
                stdin=theirs.fileno(), stdout=asyncio.subprocess.DEVNULL, stderr=None,
                env=self._sandbox.env, start_new_session=True)
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self._control = ours

    async def fork(self, place: ChildPlace) -> ForkedProcess:
        """A fresh child in `place`; ForkServerGone when the server is not there."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            order: _Order = {"cwd": place.folder, "env": place.env, **_who(place.user)}
            pid, pidfd = await self._order(order, theirs.fileno())
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        reader, writer = await asyncio.open_unix_connection(sock=ours)
        return ForkedProcess(pid, pidfd, reader, writer)

    async def clear(self, user: SandboxUser) -> None:
        """Kill every process `user`'s uid left running (a slot changing hands)."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            _, pidfd = await self._order({"clear": True, **_who(user)}, theirs.fileno())
        finally:
            ours.close()
            theirs.close()
        try:
            await _readable(pidfd)
        finally:
            os.close(pidfd)

    async def _order(self, order: _Order, channel: int) -> tuple[int, int]:
        if self._control is None:
            raise ForkServerGone("the fork server is not running")
        async with self._lock:  # one order at a time: answers come back in order
            return await asyncio.to_thread(self._ask, self._control, order, channel)

    @staticmethod
    def _ask(control: socket.socket, order: _Order, channel: int) -> tuple[int, int]:
        try:
            socket.send_fds(control, [jsonutil.dumps(order)], [channel])
            data, fds, _, _ = socket.recv_fds(control, 16, 1)
        except OSError as exc:
            raise ForkServerGone(f"the fork server is gone: {exc}") from None
        if len(data) != 4:
            raise ForkServerGone("the fork server is gone")
        if not fds:
            raise ForkServerGone("a forked child ended at once")
        (pid,) = struct.unpack(">i", data)
        return pid, fds[0]

    async def close(self) -> None:
        if self._control is not None:
            self._control.close()
            self._control = None
        if self._proc is not None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()
            with contextlib.suppress(Exception):
                await self._proc.wait()


class _Order(TypedDict, total=False):
    """What the fork server is asked (tools/python_runner.py reads it): fork a child in `cwd`
    with `env`, or `clear` the processes a uid left; as the user `uid` (None: its own).
    """

    cwd: str | None
    env: dict[str, str]
    clear: bool
    uid: int | None
    gid: int
    exclusive: bool


def _who(user: SandboxUser | None) -> _Order:
    if user is None:
        return {"uid": None}
    return {"uid": user.uid, "gid": user.gid, "exclusive": user.exclusive}


async def _readable(fd: int) -> None:
    """Until `fd` is readable (a pidfd is, once its process has exited)."""
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(fd, wake)
    try:
        await ready
    finally:
        loop.remove_reader(fd)
