"""What a python step can reach of the worker that runs it: a real `noetl-stream worker`
process, started with a credential key and a NATS password in its environment, runs steps that
look for them, and one that kills its worker (docs/security.md)."""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from cli import CLI

from noetl_stream.runtime.connection import Bus, connect
from noetl_stream.runtime.provision import provision
from noetl_stream.runtime.services import run_services, submit_and_watch
from noetl_stream.testing.nats import run_nats_server
from noetl_stream.tools import python_runner

pytestmark = pytest.mark.e2e

SECRET_KEY = "wv0Kx3gq6X2nB3q7r8s9t0u1v2w3x4y5z6A7B8C9D0E="
NATS_PASSWORD = "worker-password-that-must-stay-put"
SYSTEM_PYTHON = Path(f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}")

SNOOP = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: snoop
workflow:
  - step: start
    tool:
      kind: python
      code: |
        import os
        try:
            with open(f"/proc/{os.getppid()}/environ", "rb") as f:
                parent = f.read().decode(errors="replace")
        except OSError as exc:
            parent = type(exc).__name__
        result = {"env": dict(os.environ), "parent_environ": parent, "uid": os.getuid(),
                  "own_session": os.getsid(0) == os.getpid()}
"""

KILL_WORKER = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: kill_worker
workflow:
  - step: start
    tool:
      kind: python
      code: |
        import os, signal
        os.kill(os.getppid(), signal.SIGKILL)
        result = "still here"
"""


class Worker:
    """`noetl-stream worker` as its own process, with secrets in its environment."""

    def __init__(self, url: str, log: Path, env: dict[str, str]) -> None:
        self.url, self.log, self.env = url, log, env
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        with open(self.log, "wb") as log:
            self.proc = await asyncio.create_subprocess_exec(
                str(CLI), "worker", "--nats-url", self.url, "--python-processes", "1",
                stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=log,
                env={**os.environ, **self.env})

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.terminate()
            await self.proc.wait()


@pytest.fixture
async def nats_bus(tmp_path: Path) -> AsyncIterator[Bus]:
    async with run_nats_server(tmp_path / "nats") as server:
        bus = await connect(server.url, name="sandbox-test")
        try:
            await provision(bus)
            yield bus
        finally:
            await bus.close()


def _sandbox_interpreter() -> Iterator[Path | None]:
    """An interpreter `nobody` can run: the system's python of our version, with our orjson on
    its path through a wrapper script (this checkout's own interpreter may sit in a folder only
    root can enter). None when the machine has no such python or the runner is out of reach.
    """
    if os.geteuid() != 0 or not SYSTEM_PYTHON.exists():
        yield None
        return
    folder = Path(tempfile.mkdtemp(prefix="noetl-sandbox-python-"))
    try:
        shutil.copytree(Path(orjson.__file__).parent, folder / "site" / "orjson")
        wrapper = folder / "python"
        wrapper.write_text(f'#!/bin/sh\nPYTHONPATH={folder / "site"} exec {SYSTEM_PYTHON} "$@"\n')
        for path in [folder, *folder.rglob("*")]:
            path.chmod(path.stat().st_mode | stat.S_IROTH | stat.S_IXOTH
                       | (stat.S_IXOTH if path.is_dir() else 0))
        wrapper.chmod(0o755)
        runner = Path(python_runner.__file__)
        reachable = subprocess.run(
            [str(wrapper), "-c", f"import orjson; open({str(runner)!r}).close()"], user=65534,
            group=65534, extra_groups=[], capture_output=True, timeout=30)
        yield wrapper if reachable.returncode == 0 else None
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def sandbox_python() -> Iterator[Path | None]:
    yield from _sandbox_interpreter()


def _worker_env(sandbox_python: Path | None) -> dict[str, str]:
    env = {"NOETL_STREAM_SECRET_KEY": SECRET_KEY, "NOETL_STREAM_NATS_USER": "worker-default",
           "NOETL_STREAM_NATS_PASSWORD": NATS_PASSWORD}
    if sandbox_python is not None:
        env |= {"NOETL_STREAM_PYTHON_EXECUTABLE": str(sandbox_python),
                "NOETL_STREAM_PYTHON_USER": "nobody"}
    return env


async def _run(bus: Bus, worker: Worker, playbook: str, name: str) -> dict[str, Any]:
    async with run_services(bus, worker=False):
        await worker.start()
        try:
            return await submit_and_watch(bus, playbook_text=playbook, playbook_file=name,
                                          payload={}, on_event=lambda _: None, timeout_s=90)
        finally:
            if worker.proc is not None and worker.proc.returncode is not None:
                print(worker.log.read_text())


@pytest.mark.timeout(150)
async def test_a_python_step_sees_none_of_the_workers_environment(
        nats_bus: Bus, tmp_path: Path, sandbox_python: Path | None) -> None:
    worker = Worker(_url(nats_bus), tmp_path / "worker.log", _worker_env(sandbox_python))
    try:
        final = await _run(nats_bus, worker, SNOOP, "snoop.yaml")
    finally:
        await worker.stop()

    assert final["event_type"] == "execution.completed", final
    seen = final["result"]
    names = set(seen["env"])
    assert not {n for n in names if n.startswith("NOETL_STREAM_")}, names
    text = orjson.dumps(seen).decode()
    assert SECRET_KEY not in text and NATS_PASSWORD not in text
    if os.geteuid() != 0 or sandbox_python is not None:
        # Non-dumpable, or of another user than its children: the worker's environ is closed
        # (a root child could read it: only root workers without a usable sandbox user).
        assert seen["parent_environ"] == "PermissionError", seen["parent_environ"][:200]
    assert seen["own_session"] is True
    # PWD: the wrapper's shell sets it.
    assert names <= {"PATH", "LANG", "LANGUAGE", "TZ", "TMPDIR", "HOME", "PYTHONPATH",
                     "PYTHONHOME", "SSL_CERT_FILE", "SSL_CERT_DIR", "PWD"} | {
        n for n in names if n.startswith("LC_")}, names
    if sandbox_python is not None:
        assert seen["uid"] == 65534


@pytest.mark.timeout(150)
async def test_a_python_step_cannot_kill_a_root_worker(
        nats_bus: Bus, tmp_path: Path, sandbox_python: Path | None) -> None:
    if sandbox_python is None:
        pytest.skip("needs a root worker and an interpreter `nobody` can run: a worker of the "
                    "same user as its children can be signalled by them (docs/security.md)")
    worker = Worker(_url(nats_bus), tmp_path / "worker.log", _worker_env(sandbox_python))
    try:
        final = await _run(nats_bus, worker, KILL_WORKER, "kill_worker.yaml")
        assert worker.proc is not None and worker.proc.returncode is None, "the worker died"
    finally:
        await worker.stop()

    assert final["event_type"] == "execution.failed", final
    assert "PermissionError" in orjson.dumps(final).decode()


def _url(bus: Bus) -> str:
    url = bus.nc.connected_url
    assert url is not None
    return f"nats://{url.hostname}:{url.port}"
