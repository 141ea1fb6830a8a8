"""`noetl-stream replay` as a user runs it, against a server and worker (processes of their own)
on the test's nats-server: a five-step execution whose fourth step failed is replayed as a new
execution that calls only the fourth and fifth steps (counted by the local HTTP endpoint), and
from a named step that calls it and everything after it; each execution names the other (state,
events, API); the new executions verify; an unknown step or execution is refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp
import pytest
from cli import run_cli
from test_cli_restart import Processes, calls

from local_http import HttpService
from noetl_stream.api import open_authenticator
from noetl_stream.bus.connection import Bus
from noetl_stream.bus.nats_server import NatsServer, free_port
from noetl_stream.testing.waiting import assert_eventually
from playbook_files import read_playbook

pytestmark = pytest.mark.e2e


def events_of(stdout: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


async def test_replay_runs_a_new_linked_execution_from_where_the_original_stopped(
        bus: Bus, nats_server: NatsServer, http_service: HttpService, tmp_path: Path) -> None:
    url = ["--nats-url", nats_server.url]
    auth = await open_authenticator(bus)
    await auth.users.add("ops", ["operator"], None)
    key, _ = await auth.keys.create("ops", ["operator"])
    port = free_port()
    api = f"http://127.0.0.1:{port}"
    playbook = tmp_path / "chain.yaml"
    playbook.write_text(read_playbook("integration", "restart_chain.yaml", api_url=http_service.url))
    (tmp_path / "logs").mkdir()
    processes = Processes(nats_server.url, tmp_path / "logs")
    await processes.start("server", "worker", http=f"127.0.0.1:{port}")
    try:
        failed = await run_cli("run", str(playbook), "--json", "--quiet", "--label", "team=data",
                               *url)
        assert failed.returncode == 1, failed.stderr
        original = str(failed.summary["execution_id"])
        assert calls(http_service) == {"one": 1, "two": 1, "three": 1, "four": 1, "five": 0}

        replayed = await run_cli("replay", original, "--set", "status=200", "--json", *url)
        assert replayed.returncode == 0, replayed.stderr
        first = replayed.summary
        assert first["execution_id"] != original
        assert first["status"] == "completed"
        assert calls(http_service) == {"one": 1, "two": 1, "three": 1, "four": 2, "five": 1}
        assert {name: first["steps"][name]["runs"] for name in first["steps"]} == {
            "start": 0, "two": 0, "three": 0, "four": 1, "five": 1}
        assert first["steps"]["three"]["result"] == failed.summary["steps"]["three"]["result"]

        from_two = await run_cli("replay", original, "--from", "two", "--set", "status=200",
                                 "--json", *url)
        assert from_two.returncode == 0, from_two.stderr
        assert calls(http_service) == {"one": 1, "two": 2, "three": 2, "four": 3, "five": 2}
        second = str(from_two.summary["execution_id"])

        for execution_id in (original, str(first["execution_id"]), second):
            verified = await run_cli("verify", execution_id, *url)
            assert verified.returncode == 0, verified.stderr

        # The new execution's start names the original; the original's log names both replays.
        started = events_of((await run_cli("watch", second, "--json", *url)).stdout)[0]
        assert (started["event_type"], started["replay_of"]) == ("execution.started", original)
        assert started["labels"] == {"team": "data"}  # a replay is found by the original's labels
        watched = events_of((await run_cli("watch", original, "--json", *url)).stdout)
        assert [e["replay_execution_id"] for e in watched
                if e["event_type"] == "execution.replayed"] == [first["execution_id"], second]

        async def listening() -> None:
            async with aiohttp.ClientSession() as http:
                try:
                    async with http.get(f"{api}/health") as resp:
                        assert resp.status == 200
                except aiohttp.ClientConnectionError as exc:
                    raise AssertionError("not listening yet") from exc
        await assert_eventually(listening, timeout_s=30, interval_s=0.1)
        headers = {"Authorization": f"Bearer {key}"}
        async with aiohttp.ClientSession(headers=headers) as http:
            async with http.get(f"{api}/api/executions/{original}") as resp:
                assert (await resp.json())["replays"] == [first["execution_id"], second]
            async with http.get(f"{api}/api/executions/{second}") as resp:
                assert (await resp.json())["replay_of"] == original
            async with http.post(f"{api}/api/executions/{original}/replay",
                                 json={"from_step": "five"}) as resp:
                assert resp.status == 202
                accepted = await resp.json()
        assert accepted["roots"] == ["five"]
        assert accepted["kept"] == ["start", "three", "two"]
        over_api = await run_cli("watch", str(accepted["execution_id"]), "--json", *url)
        assert over_api.returncode == 0, over_api.stderr
        assert calls(http_service) == {"one": 1, "two": 2, "three": 2, "four": 3, "five": 3}
        remote = await run_cli("replay", original, "--from", "five", "--json", "--server", api,
                               "--token", key)
        assert remote.returncode == 0, remote.stderr
        assert remote.summary["status"] == "completed"
        assert calls(http_service) == {"one": 1, "two": 2, "three": 2, "four": 3, "five": 4}

        unknown_step = await run_cli("replay", original, "--from", "six", *url)
        assert unknown_step.returncode == 2
        assert unknown_step.stderr.strip() == (
            'noetl-stream: replay refused: the playbook has no step "six"')
        unknown = await run_cli("replay", "4242", *url)
        assert unknown.returncode == 2
        assert unknown.stderr.strip() == "noetl-stream: no execution 4242 is known"
    finally:
        await processes.stop_all()
