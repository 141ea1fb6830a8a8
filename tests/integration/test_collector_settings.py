"""A process running a server or a worker collects its youngest garbage generation every
GEN0_THRESHOLD allocations, not Python's 700 (collector.py), and leaves a higher setting alone;
`noetl-stream server` and `worker` freeze what start-up made out of later collections (real
nats-server, server and worker)."""

from __future__ import annotations

import asyncio
import gc
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from noetl_stream.bus.connection import Bus
from noetl_stream.bus.nats_server import NatsServer
from noetl_stream.collector import GEN0_THRESHOLD
from noetl_stream.services import run_services

pytestmark = pytest.mark.integration

CLI = Path(sys.executable).with_name("noetl-stream")


@pytest.fixture
def python_defaults() -> Iterator[None]:
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    try:
        yield
    finally:
        gc.set_threshold(*before)


@pytest.mark.parametrize(("server", "worker"), [(True, False), (False, True)])
async def test_a_server_or_a_worker_raises_the_first_threshold(
        bus: Bus, python_defaults: None, server: bool, worker: bool) -> None:
    async with run_services(bus, server=server, worker=worker, python_children=0):
        assert gc.get_threshold() == (GEN0_THRESHOLD, 10, 10)


async def test_a_higher_threshold_is_kept(bus: Bus, python_defaults: None) -> None:
    gc.set_threshold(50_000, 5, 5)
    async with run_services(bus, python_children=0):
        assert gc.get_threshold() == (50_000, 5, 5)


def test_freezing_takes_the_live_objects_out_of_full_collections() -> None:
    # In a child interpreter: a frozen test process would keep what the tests make.
    code = ("import gc\n"
            "from noetl_stream.collector import freeze_start_up\n"
            "kept = [[i] for i in range(50_000)]\n"
            "frozen = freeze_start_up()\n"
            "assert frozen == gc.get_freeze_count() >= 50_000, frozen\n"
            "print(len(gc.get_objects()))\n")
    left = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert int(left.stdout) < 10_000  # what a full collection still walks


@pytest.mark.parametrize("command", [["server"], ["worker", "--python-processes", "0"]])
async def test_a_started_server_or_worker_freezes_its_start_up_objects(
        nats_server: NatsServer, tmp_path: Path, command: list[str]) -> None:
    log_path = tmp_path / "service.log"
    with log_path.open("wb") as log:
        proc = await asyncio.create_subprocess_exec(
            str(CLI), "-vv", *command, "--nats-url", nats_server.url,
            env={**os.environ, "NOETL_STREAM_HOME": str(tmp_path / "home")},
            stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=log)
    try:
        for _ in range(600):  # up to a minute on a loaded machine
            text = log_path.read_text(errors="replace")
            if "running" in text or proc.returncode is not None:
                break
            await asyncio.sleep(0.1)
    finally:
        proc.terminate()
        await proc.wait()
    text = log_path.read_text(errors="replace")
    frozen = re.search(r"start-up done: (\d+) objects frozen", text)
    assert frozen is not None, text[-3000:]
    assert int(frozen.group(1)) > 50_000, frozen.group(0)  # modules, models, the services
    assert text.index(frozen.group(0)) < text.index(" running")
