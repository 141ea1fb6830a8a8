"""What `noetl-stream restart` and `replay` tell a person, run as a user runs them against a
server and worker (processes of their own) on the test's nats-server: a run that fails again
exits 1 with nothing on stdout and its one-line reason on stderr (neither command shows live
progress that would have said it), and a replay from a step reads the results its original's
earlier steps left, a loop's included."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from cli import run_cli
from test_cli_restart import Processes

from noetl_stream.bus.nats_server import NatsServer

pytestmark = pytest.mark.e2e

EXAMPLES = Path(__file__).resolve().parents[2] / "playbooks" / "examples"


@pytest.fixture
async def url(nats_server: NatsServer, tmp_path: Path) -> AsyncIterator[list[str]]:
    """A server and a worker, processes of their own on the test's nats-server; the CLI's
    option that reaches it."""
    (tmp_path / "logs").mkdir()
    processes = Processes(nats_server.url, tmp_path / "logs")
    await processes.start("server", "worker")
    try:
        yield ["--nats-url", nats_server.url]
    finally:
        await processes.stop_all()


async def test_a_restart_or_replay_that_fails_again_says_why_in_one_line(url: list[str]) -> None:
    failed = await run_cli("run", str(EXAMPLES / "failure_routing.yaml"), "--json", "--quiet",
                           "--set", "fail=true", "--set", "cleanup_on_error=false", *url)
    assert failed.returncode == 1, failed.stderr
    original = str(failed.summary["execution_id"])

    for verb in ("restart", "replay"):
        again = await run_cli(verb, original, *url)
        assert again.returncode == 1, (verb, again.stderr)
        assert again.stdout == "", (verb, again.stdout)
        lines = again.stderr.strip().splitlines()
        assert len(lines) == 1, (verb, again.stderr)
        assert "failed" in lines[0] and 'step "load"' in lines[0], (verb, lines)
        assert "the warehouse refused the batch" in lines[0], (verb, lines)
        assert "Traceback" not in again.stderr


async def test_a_replay_from_a_step_reads_the_results_of_the_steps_before_it(url: list[str]) -> None:
    hello = await run_cli("run", str(EXAMPLES / "hello.yaml"), "--json", "--quiet",
                          "--set", "name=NATS", *url)
    assert hello.returncode == 0, hello.stderr
    original = str(hello.summary["execution_id"])

    for step in ("summary", "shout"):  # summary reads the loop `square`; shout reads `start`
        replayed = await run_cli("replay", original, "--from", step, *url)
        assert replayed.returncode == 0, (step, replayed.stderr)
        assert json.loads(replayed.stdout) == {
            "shouted": "HELLO, NATS!", "squares": [9, 1, 4], "total": 14}, step
