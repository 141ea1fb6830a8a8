"""`noetl-stream restart` as a user runs it, against a server and worker (processes of their own in
the first test) on the test's nats-server:
a five-step execution whose fourth step fails is restarted with the workload value that fixes it
and completes without calling steps 1-3 again; `--from` re-runs a step and everything after it;
a restart that cannot apply is refused in one line; `verify` still passes after each restart, and
`watch` ends at the restart's end; a server killed with -9 right after a restart is recorded is
replaced and each step that runs again is called once; a step that failed on a missing credential
runs again once `credential set` stored it."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import aiohttp
import pytest
from cli import CLI, run_cli

from local_http import HttpService
from noetl_stream.api import open_authenticator
from noetl_stream.bus.connection import Bus
from noetl_stream.bus.nats_server import NatsServer, free_port
from noetl_stream.services import run_services
from noetl_stream.testing.waiting import assert_eventually
from playbook_files import read_playbook

pytestmark = pytest.mark.e2e

STEPS = ("one", "two", "three", "four", "five")


class Processes:
    """`noetl-stream server` and `noetl-stream worker` as processes of their own on one NATS."""

    def __init__(self, url: str, logs: Path) -> None:
        self.url, self.logs = url, logs
        self.procs: dict[str, asyncio.subprocess.Process] = {}

    async def start(self, *roles: str, http: str | None = None) -> None:
        for role in roles:
            extra = ["--python-processes", "1"] if role == "worker" else []
            if role == "server" and http is not None:
                extra = ["--http", http]
            with open(self.logs / f"{role}-{len(list(self.logs.iterdir()))}.log", "wb") as log:
                self.procs[role] = await asyncio.create_subprocess_exec(
                    str(CLI), role, "--nats-url", self.url, *extra,
                    stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=log)

    async def stop(self, role: str, sig: signal.Signals = signal.SIGTERM) -> None:
        proc = self.procs.pop(role)
        if proc.returncode is None:
            proc.send_signal(sig)
        await proc.wait()

    async def stop_all(self) -> None:
        for role in list(self.procs):
            await self.stop(role)


def calls(service: HttpService) -> dict[str, int]:
    return {key: service.calls[key] for key in STEPS}


async def test_a_failed_execution_restarts_at_its_failed_step_and_from_a_named_step(
        bus: Bus, nats_server: NatsServer, http_service: HttpService, tmp_path: Path) -> None:
    url = ["--nats-url", nats_server.url]
    playbook = tmp_path / "chain.yaml"
    playbook.write_text(read_playbook("integration", "restart_chain.yaml", api_url=http_service.url))
    (tmp_path / "logs").mkdir()
    processes = Processes(nats_server.url, tmp_path / "logs")
    await processes.start("server", "worker")
    try:
        failed = await run_cli("run", str(playbook), "--json", "--quiet", *url)
        assert failed.returncode == 1, failed.stderr
        summary = failed.summary
        execution_id = str(summary["execution_id"])
        assert summary["status"] == "failed"
        assert summary["steps"]["four"]["status"] == "failed"
        assert calls(http_service) == {"one": 1, "two": 1, "three": 1, "four": 1, "five": 0}

        # Not without a fix: a restart that fails again ends failed again, exit 1.
        again = await run_cli("restart", execution_id, "--json", *url)
        assert again.returncode == 1, again.stderr
        assert again.summary["steps"]["four"]["runs"] == 2
        assert calls(http_service) == {"one": 1, "two": 1, "three": 1, "four": 2, "five": 0}

        fixed = await run_cli("restart", execution_id, "--set", "status=200", "--json", *url)
        assert fixed.returncode == 0, fixed.stderr
        done = fixed.summary
        assert done["status"] == "completed"
        assert done["result"] == {"key": "five", "calls": 1}
        assert calls(http_service) == {"one": 1, "two": 1, "three": 1, "four": 3, "five": 1}
        assert {name: done["steps"][name]["runs"] for name in done["steps"]} == {
            "start": 1, "two": 1, "three": 1, "four": 3, "five": 1}
        assert done["steps"]["start"]["result"] == {"key": "one", "calls": 1}

        verified = await run_cli("verify", execution_id, *url)
        assert verified.returncode == 0, verified.stderr
        # Followed from its first event, the execution ends where its restart ended, not at the
        # failure before it.
        watched = await run_cli("watch", execution_id, "--json", *url)
        assert watched.returncode == 0, watched.stderr
        assert '"event_type":"execution.failed"' in watched.stdout
        assert watched.stdout.strip().splitlines()[-1].startswith(
            '{"event_id":"evt:' + execution_id + ':execution.completed:2"')

        refused = await run_cli("restart", execution_id, *url)
        assert refused.returncode == 2
        assert refused.stderr.strip() == (
            f"noetl-stream: restart refused: execution {execution_id} is completed; only a "
            "failed or cancelled execution restarts without --from STEP")
        unknown_step = await run_cli("restart", execution_id, "--from", "six", *url)
        assert unknown_step.returncode == 2
        assert 'the playbook has no step "six"' in unknown_step.stderr

        from_two = await run_cli("restart", execution_id, "--from", "two", "--json", *url)
        assert from_two.returncode == 0, from_two.stderr
        assert calls(http_service) == {"one": 1, "two": 2, "three": 2, "four": 4, "five": 2}
        assert from_two.summary["steps"]["start"]["runs"] == 1

        verified = await run_cli("verify", execution_id, *url)
        assert verified.returncode == 0, verified.stderr

        unknown = await run_cli("restart", "4242", *url)
        assert unknown.returncode == 2
        assert unknown.stderr.strip() == "noetl-stream: no execution 4242 is known"

        # The server killed with -9 as it takes a restart: the next one applies it, each step
        # that runs again is called once.
        recorded = await run_cli("restart", execution_id, "--from", "four", "--detach", *url)
        assert recorded.returncode == 0, recorded.stderr
        await processes.stop("server", signal.SIGKILL)
        await processes.start("server")
        ended = await run_cli("watch", execution_id, "--json", *url, timeout_s=120)
        assert ended.returncode == 0, ended.stderr
        assert calls(http_service) == {"one": 1, "two": 2, "three": 2, "four": 5, "five": 3}
        verified = await run_cli("verify", execution_id, *url)
        assert verified.returncode == 0, verified.stderr
    finally:
        await processes.stop_all()


async def test_a_step_failed_on_a_missing_credential_runs_again_once_it_is_set(
        bus: Bus, nats_server: NatsServer, http_service: HttpService, tmp_path: Path) -> None:
    url = ["--nats-url", nats_server.url]
    playbook = tmp_path / "nightly.yaml"
    playbook.write_text(read_playbook("e2e", "restart_credential.yaml", url=http_service.url))
    async with run_services(bus, python_children=1):
        failed = await run_cli("run", str(playbook), "--json", "--quiet", *url)
        assert failed.returncode == 1, failed.stderr
        execution_id = str(failed.summary["execution_id"])
        assert 'no credential named "nightly_token"' in str(failed.summary["error"])
        assert calls(http_service) == {"one": 1, "two": 1, "three": 1, "four": 0, "five": 0}

        saved = await run_cli("credential", "set", "nightly_token", "--kind", "bearer",
                              "--data", '{"token": "t0ken"}', *url)
        assert saved.returncode == 0, saved.stderr
        restarted = await run_cli("restart", execution_id, "--json", *url)

        assert restarted.returncode == 0, restarted.stderr
        assert restarted.summary["result"] == {"key": "five", "calls": 1}
        assert calls(http_service) == {"one": 1, "two": 1, "three": 1, "four": 1, "five": 1}
        assert restarted.summary["steps"]["four"]["runs"] == 2
        verified = await run_cli("verify", execution_id, *url)
        assert verified.returncode == 0, verified.stderr


async def test_restart_over_the_http_api_with_server(
        bus: Bus, nats_server: NatsServer, http_service: HttpService, tmp_path: Path) -> None:
    auth = await open_authenticator(bus)
    await auth.users.add("ops", ["operator"], None)
    key, _ = await auth.keys.create("ops", ["operator"])
    port = free_port()
    remote = ["--server", f"http://127.0.0.1:{port}", "--token", key]
    playbook = tmp_path / "chain.yaml"
    playbook.write_text(read_playbook("integration", "restart_chain.yaml", api_url=http_service.url))
    (tmp_path / "logs").mkdir()
    processes = Processes(nats_server.url, tmp_path / "logs")
    await processes.start("server", "worker", http=f"127.0.0.1:{port}")
    try:
        async def listening() -> None:
            async with aiohttp.ClientSession() as http:
                try:
                    async with http.get(f"http://127.0.0.1:{port}/health") as resp:
                        assert resp.status == 200
                except aiohttp.ClientConnectionError as exc:
                    raise AssertionError("not listening yet") from exc
        await assert_eventually(listening, timeout_s=30, interval_s=0.1)

        failed = await run_cli("run", str(playbook), "--json", "--quiet", *remote)
        assert failed.returncode == 1, failed.stderr
        execution_id = str(failed.summary["execution_id"])

        fixed = await run_cli("restart", execution_id, "--set", "status=200", "--json", *remote)
        assert fixed.returncode == 0, fixed.stderr
        assert fixed.summary["status"] == "completed"
        assert calls(http_service) == {"one": 1, "two": 1, "three": 1, "four": 2, "five": 1}
        watched = await run_cli("watch", execution_id, *remote)
        assert watched.returncode == 0, watched.stderr

        refused = await run_cli("restart", execution_id, *remote)
        assert refused.returncode == 2
        assert refused.stderr.strip().startswith("noetl-stream: restart refused: execution ")
        unknown = await run_cli("restart", "4242", *remote)
        assert unknown.returncode == 2
        assert unknown.stderr.strip() == "noetl-stream: execution 4242 not found"
    finally:
        await processes.stop_all()
