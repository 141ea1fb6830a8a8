"""`noetl-stream server` and `noetl-stream worker` as separate processes on one NATS, with the
environment a test gives them (a retention of seconds, say), each logging to its own file.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

from cli import CLI


class Processes:
    """Starts and stops noetl-stream processes; `stop_all` ends whichever are still running."""

    def __init__(self, url: str, logs: Path, env: dict[str, str] | None = None) -> None:
        self.url = url
        self.logs = logs
        self.env = {**os.environ, **(env or {})}
        self.procs: dict[str, asyncio.subprocess.Process] = {}

    async def start(self, name: str, role: str, *extra: str) -> asyncio.subprocess.Process:
        """`noetl-stream <role> --nats-url URL <extra>`, known as `name` (logs in <name>.log)."""
        with open(self.logs / f"{name}.log", "ab") as log:
            proc = await asyncio.create_subprocess_exec(
                str(CLI), role, "--nats-url", self.url, *extra, stdin=asyncio.subprocess.DEVNULL,
                stdout=log, stderr=log, env=self.env)
        self.procs[name] = proc
        return proc

    async def stop(self, name: str, sig: signal.Signals = signal.SIGTERM) -> None:
        proc = self.procs.pop(name)
        if proc.returncode is None:
            proc.send_signal(sig)
        await proc.wait()

    async def stop_all(self) -> None:
        for name in list(self.procs):
            await self.stop(name, signal.SIGKILL)

    def log_of(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text(errors="replace")


class RoleProcess:
    """One `noetl-stream <role>` child process that a test stops and starts again, its output in
    a log file per start (<role>-1.log, <role>-2.log, ...)."""

    def __init__(self, role: str, url: str, logs: Path) -> None:
        self.role, self.url, self.logs = role, url, logs
        self.proc: asyncio.subprocess.Process | None = None
        self.starts = 0

    async def start(self) -> None:
        self.starts += 1
        with open(self.logs / f"{self.role}-{self.starts}.log", "wb") as log:
            self.proc = await asyncio.create_subprocess_exec(
                str(CLI), self.role, "--nats-url", self.url, stdin=asyncio.subprocess.DEVNULL,
                stdout=log, stderr=log)

    async def stop(self, sig: signal.Signals = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(sig)
            await self.proc.wait()
        self.proc = None

    def log_text(self) -> str:
        return "".join(p.read_text() for p in sorted(self.logs.glob(f"{self.role}-*.log")))
