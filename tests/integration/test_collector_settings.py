"""A process running a server or a worker collects its youngest garbage generation every
GEN0_THRESHOLD allocations, not Python's 700 (collector.py), and leaves a higher setting alone
(real nats-server, server and worker)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from noetl_stream.bus.connection import Bus
from noetl_stream.collector import GEN0_THRESHOLD
from noetl_stream.services import run_services

pytestmark = pytest.mark.integration


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
