"""A fork server for python children: fresh interpreters in a millisecond or two.

Starting an interpreter and the runner costs tens of milliseconds of CPU, and every execution's
first python step needs a fresh one (tools/python.py). The fork server is the runner started
once, as the worker's user, that never runs user code: for each child the worker sends it an
order (user, folder, environment) and one end of a socket pair, and it forks; the child takes
its own session, folder, environment and user (tools/python_runner_user.py `become`) before it reads
a step, exactly as a started interpreter does. The worker gets a pidfd for each child: it
signals and awaits that process, never a reused pid. `clear` forks a child that only kills what
a slot's uid left running. When the fork server is gone, children are started as before.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import select
import signal
import socket
import struct

from noetl_stream import jsonutil
from noetl_stream.tools.python_runner_forking import ForkOrder
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
        self._exit: asyncio.Future[None] | None = None  # shared by every waiter

    @property
    def returncode(self) -> int | None:
        if not self._exited and select.select([self._pidfd], [], [], 0)[0]:
            if self._exit is not None and not self._exit.done():
                return -signal.SIGKILL  # closing the pidfd waits until nothing watches it
            self._ended()
        return -signal.SIGKILL if self._exited else None

    def kill(self) -> None:
        if not self._exited:
            signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)

    async def wait(self) -> int | None:
        if not self._exited:
            if self._exit is None:
                self._exit = asyncio.ensure_future(_readable(self._pidfd))
            await asyncio.shield(self._exit)
            if not self._exited:
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
        # Orders in flight, oldest first: the fork server answers them in the order it got
        # them, so several may be sent before the first answer comes (no lock, no thread).
        self._answers: collections.deque[asyncio.Future[tuple[int, int]]] = collections.deque()

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
        ours.setblocking(False)
        asyncio.get_running_loop().add_reader(ours.fileno(), self._answered)
        self._control = ours

    async def fork(self, place: ChildPlace) -> ForkedProcess:
        """A fresh child in `place`; ForkServerGone when the server is not there."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            order: ForkOrder = {"cwd": place.folder, "env": place.env, **_who(place.user)}
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

    async def _order(self, order: ForkOrder, channel: int) -> tuple[int, int]:
        """Send one order and await its answer (pid, pidfd). The send never waits: an order is
        a few hundred bytes on a datagram socket whose buffer holds many.
        """
        control = self._control
        if control is None:
            raise ForkServerGone("the fork server is not running")
        answer: asyncio.Future[tuple[int, int]] = asyncio.get_running_loop().create_future()
        try:
            socket.send_fds(control, [jsonutil.dumps(order)], [channel])
        except OSError as exc:  # BlockingIOError included: a server that stopped reading
            self._gone(f"the fork server is gone: {exc}")
            raise ForkServerGone(f"the fork server is gone: {exc}") from None
        self._answers.append(answer)
        return await answer

    def _answered(self) -> None:
        """The control socket is readable: hand each answer to the oldest order waiting."""
        control = self._control
        while control is not None:
            try:
                data, fds, _, _ = socket.recv_fds(control, 16, 1)
            except BlockingIOError:
                return
            except OSError as exc:
                self._gone(f"the fork server is gone: {exc}")
                return
            if len(data) != 4:
                for fd in fds:
                    os.close(fd)
                self._gone("the fork server is gone")
                return
            answer = self._answers.popleft() if self._answers else None
            if answer is None or answer.done():  # its order was cancelled: nobody wants it
                for fd in fds:
                    os.close(fd)
                continue
            if fds:
                answer.set_result((struct.unpack(">i", data)[0], fds[0]))
            else:
                answer.set_exception(ForkServerGone("a forked child ended at once"))

    def _gone(self, why: str) -> None:
        """No answer will come: the orders waiting fail, and later ones start interpreters."""
        if self._control is not None:
            asyncio.get_running_loop().remove_reader(self._control.fileno())
            self._control.close()
            self._control = None
        while self._answers:
            answer = self._answers.popleft()
            if not answer.done():
                answer.set_exception(ForkServerGone(why))

    async def close(self) -> None:
        self._gone("the fork server was closed")
        if self._proc is not None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()
            with contextlib.suppress(Exception):
                await self._proc.wait()


def _who(user: SandboxUser | None) -> ForkOrder:
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
