"""The embedded nats-server (`run`, `server` and `worker` without `--nats-url`, `nats`) keeps the
durability docs/reliability.md promises for it: JetStream flushes every write before it
acknowledges it, as the shipped single-node and cluster configs do."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from noetl_stream.bus.nats_server import find_binary, free_port, start_nats_server
from noetl_stream.testing.cluster import stop_node
from noetl_stream.testing.waiting import assert_eventually

pytestmark = pytest.mark.integration


async def test_the_embedded_server_syncs_every_write_before_acknowledging_it(
        tmp_path: Path) -> None:
    folder = tmp_path / "nats"
    server = await start_nats_server(folder, record=False)
    await server.stop()
    # The embedded server runs without a monitoring port: its own config file is started again
    # with one, so the answer is nats-server's reading of that file, not ours.
    monitor = free_port()
    conf = folder / "nats-server.conf"
    with open(tmp_path / "monitored.log", "ab") as log:
        process = subprocess.Popen([str(find_binary()), "-c", str(conf), "-m", str(monitor)],
                                   stdout=log, stderr=log, stdin=subprocess.DEVNULL)
    try:
        async def jetstream_config() -> dict[str, Any]:
            assert process.poll() is None, (tmp_path / "monitored.log").read_text()
            try:
                async with aiohttp.ClientSession() as http, \
                        http.get(f"http://127.0.0.1:{monitor}/varz") as resp:
                    varz = await resp.json()
            except aiohttp.ClientConnectionError as exc:
                raise AssertionError(f"monitor port {monitor} not open yet") from exc
            return dict(varz["jetstream"]["config"])

        config = await assert_eventually(jetstream_config)
    finally:
        stop_node(process)
    assert config["sync_always"] is True, config
