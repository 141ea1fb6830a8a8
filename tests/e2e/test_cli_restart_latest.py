"""`noetl-stream restart --latest` as a user runs it: a failed execution continues on the newest
registered version of its playbook (the fix shipped as a new version), the steps that completed
are not called again, `verify` rebuilds the state across the change of version; a version that
lacks a step the execution ran is refused with that step named."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli import run_cli

from local_http import HttpService
from noetl_stream import ids
from noetl_stream.bus.connection import Bus
from noetl_stream.bus.nats_server import NatsServer
from noetl_stream.server.verify import committed_state
from noetl_stream.services import run_services
from noetl_stream.state.results import ResultStore
from noetl_stream.state.step_results import StepResults
from playbook_files import read_playbook

pytestmark = pytest.mark.e2e


def version(tmp_path: Path, url: str, number: int, status: int, second: str = "two") -> Path:
    path = tmp_path / f"nightly-{number}.yaml"
    path.write_text(read_playbook("e2e", "restart_versioned.yaml", url=url, version=number,
                                  status=status, second=second))
    return path


async def test_restart_latest_continues_on_the_newest_registered_version(
        bus: Bus, nats_server: NatsServer, http_service: HttpService, tmp_path: Path) -> None:
    url = ["--nats-url", nats_server.url]
    first = version(tmp_path, http_service.url, 1, 503)
    async with run_services(bus, python_children=0):
        registered = await run_cli("register", str(first), *url)
        assert registered.returncode == 0, registered.stderr
        failed = await run_cli("run", str(first), "--json", "--quiet", *url)
        assert failed.returncode == 1, failed.stderr
        execution_id = str(failed.summary["execution_id"])

        # The fix ships as version 2, registered under the same path.
        fixed = version(tmp_path, http_service.url, 2, 200)
        assert (await run_cli("register", str(fixed), *url)).returncode == 0
        done = await run_cli("restart", execution_id, "--latest", "--json", *url)
        assert done.returncode == 0, done.stderr
        assert done.summary["status"] == "completed"
        assert {k: done.summary["steps"][k]["runs"] for k in ("start", "two", "load")} == {
            "start": 1, "two": 1, "load": 2}
        assert (http_service.calls["one"], http_service.calls["two"]) == (1, 1)
        state = await committed_state(bus, execution_id, StepResults(bus.js, ResultStore(bus.js)))
        assert state is not None
        assert state.playbook_key == ids.playbook_key(fixed.read_text())

        verified = await run_cli("verify", execution_id, *url)
        assert verified.returncode == 0, verified.stderr

        renamed = version(tmp_path, http_service.url, 3, 200, second="second")
        assert (await run_cli("register", str(renamed), *url)).returncode == 0
        refused = await run_cli("restart", execution_id, "--from", "load", "--latest", *url)
        assert refused.returncode == 2
        assert refused.stderr.strip() == (
            'noetl-stream: restart refused: the playbook has no step "two" of the execution '
            f"(the latest version of recover/nightly, {ids.playbook_key(renamed.read_text())})")


async def test_restart_latest_of_an_unregistered_playbook_is_refused(
        bus: Bus, nats_server: NatsServer, http_service: HttpService, tmp_path: Path) -> None:
    url = ["--nats-url", nats_server.url]
    first = version(tmp_path, http_service.url, 1, 503)
    async with run_services(bus, python_children=0):
        failed = await run_cli("run", str(first), "--json", "--quiet", *url)
        assert failed.returncode == 1, failed.stderr
        refused = await run_cli("restart", str(failed.summary["execution_id"]), "--latest", *url)
        assert refused.returncode == 2
        assert refused.stderr.strip() == (
            "noetl-stream: restart --latest refused: recover/nightly is not registered in the "
            "catalog (noetl-stream register FILE)")
