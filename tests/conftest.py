"""Fixtures shared by the integration and e2e layers: a real nats-server per test, a provisioned
bus on it, a real local HTTP service, and a private NOETL_STREAM_HOME for every test."""

from __future__ import annotations

import inspect
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from aiohttp.test_utils import TestServer
from blockbuster import BlockBuster, blockbuster_ctx

from local_http import HttpService, http_app
from noetl_stream.bus.connection import Bus, connect
from noetl_stream.bus.nats_server import NatsServer
from noetl_stream.bus.provision import provision
from noetl_stream.testing.nats import run_nats_server


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test under tests/unit/ is marked `unit`, so a stage can pick by marker (.ci/run).
    The long tests run first (those marked `slow`, then by the timeout they declare), so that with
    several processes (pytest-xdist) they run side by side instead of ending the run one by one."""
    unit = pytest.mark.unit
    for item in items:
        if item.path.parent.name == "unit" and item.path.parent.parent.name == "tests":
            item.add_marker(unit)
    items.sort(key=_longest_first)


def _longest_first(item: pytest.Item) -> tuple[bool, float]:
    timeout = item.get_closest_marker("timeout")
    declared = float(timeout.args[0]) if timeout is not None and timeout.args else 0.0
    return item.get_closest_marker("slow") is None, -declared


@pytest.fixture
def shared_folder() -> Iterator[Path]:
    """A folder a python step may write: a root worker runs steps as slot uids, and tmp_path sits
    in a folder of root's alone (mode 700)."""
    folder = Path(tempfile.mkdtemp(prefix="noetl-steps-"))
    folder.chmod(0o1777)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(autouse=True)
def noetl_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Keep every test's embedded store out of the user's home and away from other tests."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("NOETL_STREAM_HOME", str(home))
    monkeypatch.delenv("NOETL_STREAM_NATS_URL", raising=False)
    monkeypatch.delenv("NOETL_STREAM_PREFIX", raising=False)
    monkeypatch.delenv("NOETL_STREAM_SERVER", raising=False)  # or the CLI would go remote
    monkeypatch.delenv("NOETL_STREAM_TOKEN", raising=False)
    return home


# The layers whose async tests share the event loop with the code under test; e2e tests drive the
# CLI in child processes, where the check would see only the test's own waiting.
_CHECKED_LAYERS = ("unit", "integration")


def _checks_blocking(request: pytest.FixtureRequest) -> bool:
    path = request.node.path
    return (inspect.iscoroutinefunction(getattr(request.node, "function", None))
            and path.parent.name in _CHECKED_LAYERS and path.parent.parent.name == "tests")


def _allow_what_must_block(buster: BlockBuster) -> None:
    """Blocking calls made on the event loop on purpose; each says why it may."""
    # Starting nats-server makes its store folder, writes its config and spawns the binary: once,
    # before any service runs on the loop (a test's fixture, or the CLI before it serves).
    _allow(buster, "noetl_stream/bus/nats_server.py", "start_nats_server")
    _allow(buster, "noetl_stream/bus/nats_server.py", "find_binary")
    # Once per process: the tool plugins' entry points are looked up (then cached, tools/registry.py),
    # the home folder is made and a SecretBox reads its key file (then cached), as services start.
    _allow(buster, "noetl_stream/tools/registry.py", "plugin_entry_points")
    _allow(buster, "noetl_stream/config.py", "home_dir")
    _allow(buster, "noetl_stream/state/crypto.py", "_read_key_file")
    # A module's first import reads its files: optional kinds (duckdb) are imported late, once,
    # as a worker starts, so that a worker without them still runs.
    _allow(buster, "<frozen importlib._bootstrap>", "_find_and_load")
    # Reading a playbook's files is what load_with_children is for: the CLI calls it before its
    # loop runs; tests call it to register fixture playbooks.
    _allow(buster, "noetl_stream/dsl/composition.py", "load_with_children")
    # asyncpg looks for ~/.pgpass and ~/.postgresql/ while it parses a DSN: a few local file
    # lookups when a pool or connection opens, not per statement; its API offers no other way.
    _allow(buster, "asyncpg/connect_utils.py", "_parse_connect_dsn_and_args",
           ("os.stat", "os.mkdir", "os.path.abspath", "io.TextIOWrapper.read"))


def _allow(buster: BlockBuster, filename: str, function: str,
           calls: tuple[str, ...] | None = None) -> None:
    """Let `function` of `filename` (and what it calls) make `calls`, or every blocking call."""
    for name, wrapped in buster.functions.items():
        if calls is None or name in calls:
            wrapped.can_block_in(filename, function)


@pytest.fixture(autouse=True)
def blocking_calls_fail(request: pytest.FixtureRequest) -> Iterator[None]:
    """An async unit or integration test fails when anything blocks its event loop (blockbuster
    wraps time.sleep, file and socket I/O, locks, ... and raises BlockingError on the loop).
    """
    if not _checks_blocking(request):
        yield
        return
    # The package's own code is checked (a blocking call with noetl_stream on the stack); the
    # test helpers in noetl_stream.testing set up fixtures, as the tests' own file reads do.
    with blockbuster_ctx("noetl_stream", excluded_modules=["noetl_stream.testing"]) as buster:
        _allow_what_must_block(buster)
        yield


@pytest.fixture
async def nats_server(tmp_path: Path) -> AsyncIterator[NatsServer]:
    async with run_nats_server(tmp_path / "nats") as server:
        yield server


@pytest.fixture
async def bus(nats_server: NatsServer) -> AsyncIterator[Bus]:
    bus = await connect(nats_server.url, name="noetl-stream-test")
    try:
        await provision(bus)
        yield bus
    finally:
        await bus.close()


@pytest.fixture
async def http_service() -> AsyncIterator[HttpService]:
    service = HttpService(url="")
    server = TestServer(http_app(service), host="127.0.0.1")
    await server.start_server()
    service.url = str(server.make_url("")).rstrip("/")
    try:
        yield service
    finally:
        await server.close()
