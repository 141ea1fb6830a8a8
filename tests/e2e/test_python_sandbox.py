"""What a python step can reach of the worker that runs it, and of other executions' steps: a
real `noetl-stream worker` process, started with a credential key and a NATS password in its
environment, runs steps that look for them, one that kills its worker, one that poisons its
interpreter for whoever comes next, and one that reads and kills a concurrent execution's step
(docs/security.md)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from cli import CLI

from noetl_stream.bus.connection import Bus, connect
from noetl_stream.bus.provision import provision
from noetl_stream.services import run_services, submit_and_watch
from noetl_stream.testing.nats import run_nats_server
from noetl_stream.tools.python_slots import WORKER_CAPABILITIES
from playbook_files import fill, playbook_path, read_playbook

pytestmark = pytest.mark.e2e

SECRET_KEY = "wv0Kx3gq6X2nB3q7r8s9t0u1v2w3x4y5z6A7B8C9D0E="
NATS_PASSWORD = "worker-password-that-must-stay-put"

SNOOP = read_playbook("e2e", "python_sandbox_snoop.yaml")
PRIVATE_IMPORT = read_playbook("e2e", "python_sandbox_private_import.yaml")

KILL_WORKER = read_playbook("e2e", "python_sandbox_kill_worker.yaml")
POISON = read_playbook("e2e", "python_sandbox_poison.yaml")
VICTIM = read_playbook("e2e", "python_sandbox_victim.yaml")
LITTER = read_playbook("e2e", "python_sandbox_litter.yaml")
SLOT_UIDS = range(59000, 60000)  # tools/python_slots.py DEFAULT_UIDS


class Worker:
    """`noetl-stream worker` as its own process, with secrets in its environment."""

    def __init__(self, url: str, log: Path, env: dict[str, str], processes: int = 1,
                 prefix: tuple[str, ...] = ()) -> None:
        self.url, self.log, self.env, self.processes = url, log, env, processes
        self.prefix = prefix  # what the worker is started under (setpriv)
        self.proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        with open(self.log, "wb") as log:
            self.proc = await asyncio.create_subprocess_exec(
                *self.prefix, str(CLI), "worker", "--nats-url", self.url, "--python-processes",
                str(self.processes),
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
    """Under a root worker: a virtualenv inside a private folder (mode 700, as `mktemp -d` or a
    home folder makes), which no slot uid can enter, reaching this checkout's libraries through
    a copy of orjson and a module of its own (`private_probe`) in its site-packages. Children
    still run as slot uids: the runner starts as root and changes its user before it reads any
    code. None when the tests do not run as root.
    """
    if os.geteuid() != 0:
        yield None
        return
    private = Path(tempfile.mkdtemp(prefix="noetl-private-"))
    try:
        assert stat.S_IMODE(private.stat().st_mode) == 0o700
        venv = private / "venv"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                       timeout=60)
        site = next((venv / "lib").glob("python*/site-packages"))
        shutil.copytree(Path(orjson.__file__).parent, site / "orjson")
        (site / "private_probe.py").write_text("VALUE = 'imported from a private folder'\n")
        python = venv / "bin" / "python"
        with pytest.raises(PermissionError):  # what a child that changed its user first met
            subprocess.run([str(python), "-c", "pass"], user=SLOT_UIDS[-1], group=SLOT_UIDS[-1],
                           extra_groups=[], capture_output=True, timeout=30)
        yield python
    finally:
        shutil.rmtree(private, ignore_errors=True)


@pytest.fixture
def sandbox_python() -> Iterator[Path | None]:
    yield from _sandbox_interpreter()


def _worker_env(sandbox_python: Path | None) -> dict[str, str]:
    env = {"NOETL_STREAM_SECRET_KEY": SECRET_KEY, "NOETL_STREAM_NATS_USER": "worker-default",
           "NOETL_STREAM_NATS_PASSWORD": NATS_PASSWORD}
    if sandbox_python is not None:
        env |= {"NOETL_STREAM_PYTHON_EXECUTABLE": str(sandbox_python)}
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
    # Non-dumpable, and of another user than its children or a child without capabilities:
    # the worker's environ is closed, whichever interpreter the children run.
    assert seen["parent_environ"] == "PermissionError", seen["parent_environ"][:200]
    assert seen["own_session"] is True
    assert names <= {"PATH", "LANG", "LANGUAGE", "TZ", "TMPDIR", "HOME", "USER", "LOGNAME", "PYTHONPATH",
                     "PYTHONHOME", "SSL_CERT_FILE", "SSL_CERT_DIR", "PWD"} | {
        n for n in names if n.startswith("LC_")}, names
    if sandbox_python is not None:
        assert seen["uid"] in SLOT_UIDS


@pytest.mark.timeout(150)
async def test_a_root_workers_own_interpreter_runs_steps_as_slot_uids_wherever_it_lives(
        nats_bus: Bus, tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("a worker that is not root cannot change its children's user")
    # This checkout's interpreter, wherever it is (here under /root, mode 700, with pyenv).
    worker = Worker(_url(nats_bus), tmp_path / "worker.log", _worker_env(None))
    try:
        final = await _run(nats_bus, worker, SNOOP, "snoop.yaml")
    finally:
        await worker.stop()
    assert final["event_type"] == "execution.completed", final
    assert final["result"]["uid"] in SLOT_UIDS
    assert final["result"]["forked"] is True  # from the fork server, not a started interpreter
    assert SECRET_KEY not in orjson.dumps(final).decode()
    assert "python steps run as root" not in worker.log.read_text()


@pytest.mark.timeout(150)
async def test_a_slot_uid_imports_from_an_interpreter_in_a_private_folder(
        nats_bus: Bus, tmp_path: Path, sandbox_python: Path | None) -> None:
    _needs_root_sandbox(sandbox_python)
    worker = Worker(_url(nats_bus), tmp_path / "worker.log", _worker_env(sandbox_python))
    try:
        final = await _run(nats_bus, worker, PRIVATE_IMPORT, "private_import.yaml")
    finally:
        await worker.stop()
    assert final["event_type"] == "execution.completed", final
    seen = final["result"]
    assert seen["value"] == "imported from a private folder"
    assert seen["uid"] in SLOT_UIDS
    assert seen["by_name"] == "PermissionError"  # the folder itself stays closed to the step


@pytest.mark.timeout(150)
async def test_a_python_step_cannot_kill_a_root_worker(
        nats_bus: Bus, tmp_path: Path, sandbox_python: Path | None) -> None:
    if sandbox_python is None:
        pytest.skip("needs a root worker: a worker of the same user as its children can be "
                    "signalled by them (docs/security.md)")
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


def _needs_root_sandbox(sandbox_python: Path | None) -> None:
    if sandbox_python is None:
        pytest.skip("needs a root worker: a worker of the same user as its children cannot "
                    "give them uids of their own")


@contextlib.asynccontextmanager
async def _serving(bus: Bus, worker: Worker) -> AsyncIterator[
        Callable[[str, str], Awaitable[dict[str, Any]]]]:
    async def run(playbook: str, name: str) -> dict[str, Any]:
        return await submit_and_watch(bus, playbook_text=playbook, playbook_file=name,
                                      payload={}, on_event=lambda _: None, timeout_s=90)

    async with run_services(bus, worker=False):
        await worker.start()
        try:
            yield run
        finally:
            await worker.stop()


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in state


@pytest.mark.timeout(200)
async def test_an_interpreter_serves_no_other_execution(
        nats_bus: Bus, tmp_path: Path, sandbox_python: Path | None) -> None:
    _needs_root_sandbox(sandbox_python)
    # One python process: every step of every execution meets in it unless it is replaced.
    worker = Worker(_url(nats_bus), tmp_path / "worker.log", _worker_env(sandbox_python))
    async with _serving(nats_bus, worker) as run:
        poisoned = await run(POISON, "poison.yaml")
        victim = await run(VICTIM, "victim.yaml")
    assert poisoned["event_type"] == "execution.completed", poisoned
    # The same execution keeps its interpreter: its own change is its own business.
    assert poisoned["result"]["planted"] == "planted"
    daemon = int(poisoned["result"]["daemon"])
    assert victim["event_type"] == "execution.completed", victim
    assert victim["result"] == {"planted": None, "dumps": '{"a": 1}'}
    # What the first execution left running as its uid went when its place changed hands.
    assert not _alive(daemon), "the first execution's daemon outlived its place"


async def _attack(nats_bus: Bus, tmp_path: Path, sandbox_python: Path | None,
                  attempts: int, prefix: tuple[str, ...] = ()
                  ) -> tuple[dict[str, Any], dict[str, Any]]:
    """A sleeper execution and, while its step runs, an attacker execution that reads its
    /proc files and kills it; their final events.
    """
    folder = Path(tempfile.mkdtemp(prefix="noetl-sandbox-attack-"))
    folder.chmod(0o1777)
    sleeper = fill(playbook_path("e2e", "python_sandbox_sleeper.yaml").read_text(),
                   folder=folder, attempts=attempts)
    attacker = fill(playbook_path("e2e", "python_sandbox_attacker.yaml").read_text(),
                    folder=folder)
    worker = Worker(_url(nats_bus), tmp_path / "worker.log", _worker_env(sandbox_python),
                    processes=2, prefix=prefix)
    try:
        async with _serving(nats_bus, worker) as run:
            slept = asyncio.create_task(run(sleeper, "sleeper.yaml"))
            for _ in range(600):
                if (folder / "pid").exists() or slept.done():
                    break
                await asyncio.sleep(0.1)
            assert (folder / "pid").exists(), "the sleeper's step never started"
            attacked = await run(attacker, "attacker.yaml")
            return await slept, attacked
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.timeout(200)
async def test_a_step_can_neither_read_nor_kill_a_concurrent_executions_step(
        nats_bus: Bus, tmp_path: Path, sandbox_python: Path | None) -> None:
    _needs_root_sandbox(sandbox_python)
    slept, attacked = await _attack(nats_bus, tmp_path, sandbox_python, attempts=1)
    assert attacked["event_type"] == "execution.completed", attacked
    tried = attacked["result"]
    assert {k: tried[k] for k in ("environ", "maps", "mem", "kill")} == {
        "environ": "PermissionError", "maps": "PermissionError", "mem": "PermissionError",
        "kill": "PermissionError"}, tried
    assert slept["event_type"] == "execution.completed", slept
    assert slept["result"]["attempts"] == 1
    assert {slept["result"]["uid"], tried["uid"]} <= set(SLOT_UIDS)
    assert slept["result"]["uid"] != tried["uid"]


@pytest.mark.timeout(200)
async def test_a_python_step_whose_process_dies_is_retried_under_its_policy(
        nats_bus: Bus, tmp_path: Path) -> None:
    folder = Path(tempfile.mkdtemp(prefix="noetl-sandbox-retry-"))
    folder.chmod(0o1777)
    sleeper = fill(playbook_path("e2e", "python_sandbox_sleeper.yaml").read_text(),
                   folder=folder, attempts=3)
    worker = Worker(_url(nats_bus), tmp_path / "worker.log", _worker_env(None))
    try:
        async with _serving(nats_bus, worker) as run:
            slept = asyncio.create_task(run(sleeper, "sleeper.yaml"))
            for _ in range(600):
                if (folder / "pid").exists() or slept.done():
                    break
                await asyncio.sleep(0.1)
            os.kill(int((folder / "pid").read_text()), 9)  # from outside, as an attacker would
            final = await slept
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert final["event_type"] == "execution.completed", (final.get("error"), final.get("steps"))
    assert final["result"]["attempts"] == 2


@pytest.mark.timeout(150)
async def test_a_python_step_that_stays_root_holds_no_capability(
        nats_bus: Bus, tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("a worker that is not root has no root children")
    # The worker's own user, chosen on purpose: what a root worker falls back to when no other
    # user can run its interpreter (a virtualenv in a private folder).
    env = {**_worker_env(None), "NOETL_STREAM_PYTHON_USER": "-"}
    worker = Worker(_url(nats_bus), tmp_path / "worker.log", env)
    try:
        final = await _run(nats_bus, worker, SNOOP, "snoop.yaml")
    finally:
        await worker.stop()
    assert final["event_type"] == "execution.completed", final
    seen = final["result"]
    assert seen["uid"] == 0
    assert seen["parent_environ"] == "PermissionError", seen["parent_environ"][:200]
    assert SECRET_KEY not in orjson.dumps(seen).decode()


def _with_worker_capabilities_only(without: str = "") -> tuple[str, ...]:
    """setpriv: root, holding only the capabilities the shipped deployments give a worker
    (less `without`).
    """
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("setpriv (util-linux) is not installed")
    if os.geteuid() != 0:
        pytest.skip("the capabilities are a root worker's")
    wanted = ",".join(f"+{name.lower()}" for name in WORKER_CAPABILITIES if name != without)
    return (setpriv, "--bounding-set", f"-all,{wanted}", "--inh-caps", "-all",
            "--ambient-caps", "-all", "--reuid", "0", "--regid", "0", "--clear-groups",
            "--no-new-privs", "--")


@pytest.mark.timeout(200)
async def test_a_worker_with_only_its_capabilities_keeps_concurrent_steps_apart(
        nats_bus: Bus, tmp_path: Path, sandbox_python: Path | None) -> None:
    prefix = _with_worker_capabilities_only()
    slept, attacked = await _attack(nats_bus, tmp_path, sandbox_python, attempts=1,
                                    prefix=prefix)
    assert attacked["event_type"] == "execution.completed", attacked
    tried = attacked["result"]
    assert {k: tried[k] for k in ("environ", "maps", "mem", "kill")} == {
        "environ": "PermissionError", "maps": "PermissionError", "mem": "PermissionError",
        "kill": "PermissionError"}, tried
    assert slept["event_type"] == "execution.completed", slept
    assert slept["result"]["attempts"] == 1
    assert {slept["result"]["uid"], tried["uid"]} <= set(SLOT_UIDS)
    assert slept["result"]["uid"] != tried["uid"]
    assert "python steps run as root" not in (tmp_path / "worker.log").read_text()


@pytest.mark.timeout(200)
async def test_a_worker_with_only_its_capabilities_clears_what_a_slot_left(
        nats_bus: Bus, tmp_path: Path, sandbox_python: Path | None) -> None:
    prefix = _with_worker_capabilities_only()
    # The worker's /tmp: sticky and open to all, as /tmp is.
    scratch = Path(tempfile.mkdtemp(prefix="noetl-sandbox-tmp-"))
    scratch.chmod(0o1777)
    env = {**_worker_env(sandbox_python), "TMPDIR": str(scratch)}
    worker = Worker(_url(nats_bus), tmp_path / "worker.log", env, prefix=prefix)
    try:
        async with _serving(nats_bus, worker) as run:
            poisoned = await run(POISON, "poison.yaml")
            victim = await run(VICTIM, "victim.yaml")
            littered = await run(LITTER, "litter.yaml")
        left = sorted(p.name for p in scratch.iterdir())
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    log = (tmp_path / "worker.log").read_text()
    assert "python steps run as root" not in log
    assert victim["event_type"] == "execution.completed", victim
    assert victim["result"] == {"planted": None, "dumps": '{"a": 1}'}
    assert not _alive(int(poisoned["result"]["daemon"])), "a slot's daemon outlived its place"
    assert littered["event_type"] == "execution.completed", littered.get("error")
    assert littered["result"]["uid"] in SLOT_UIDS
    assert Path(littered["result"]["place"]).parent == scratch
    # Stopped, the worker has removed every child's place, the closed folders included.
    assert left == [], log[-2000:]


@pytest.mark.timeout(150)
async def test_a_root_worker_lacking_a_slot_capability_says_so_and_its_steps_hold_none(
        nats_bus: Bus, tmp_path: Path) -> None:
    prefix = _with_worker_capabilities_only(without="KILL")
    worker = Worker(_url(nats_bus), tmp_path / "worker.log", _worker_env(None), prefix=prefix)
    try:
        final = await _run(nats_bus, worker, SNOOP, "snoop.yaml")
    finally:
        await worker.stop()
    log = (tmp_path / "worker.log").read_text()
    assert "python steps run as root: the worker runs as root without CAP_KILL" in log, log
    assert final["event_type"] == "execution.completed", final.get("error")
    seen = final["result"]
    assert seen["uid"] == 0  # the worker's own user, without any capability
    assert seen["parent_environ"] == "PermissionError", seen["parent_environ"][:200]
