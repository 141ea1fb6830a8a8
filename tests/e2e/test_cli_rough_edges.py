"""What a new user trips over first: malformed URLs, a taken port, signals nobody hears, `-v`
at the end of the line, completion scripts, `nats --port --store` (and a port already taken),
ids and pool names no execution or pool can have, Ctrl-C in `run`, header rows and the exit
codes they give."""

from __future__ import annotations

import asyncio
import io
import os
import signal
import socket
import sys
from pathlib import Path

import pytest
from cli import CLI, run_cli

from noetl_stream.bus.connection import Bus
from noetl_stream.bus.nats_server import NatsServer
from noetl_stream.cli.progress import ProgressPrinter
from noetl_stream.services import run_services, submit_and_watch
from noetl_stream.testing.waiting import assert_eventually
from playbook_files import read_playbook

pytestmark = pytest.mark.e2e

LISTENING = read_playbook("e2e", "cli_rough_edges_listening.yaml")


def one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, text
    assert "Traceback" not in text
    return lines[0]


@pytest.mark.parametrize("url", ["localhost:4222x", "http://localhost:4222", "nats://:4222"])
async def test_a_malformed_nats_url_is_a_one_line_usage_error(url: str) -> None:
    out = await run_cli("run", "playbooks/examples/hello.yaml", "--nats-url", url)

    assert out.returncode == 2
    assert one_line(out.stderr).startswith("noetl-stream: NATS URL")


@pytest.mark.parametrize("url", ["nats://127.0.0.1:4222", "ftp://localhost"])
async def test_a_server_url_that_is_not_http_is_a_one_line_usage_error(url: str) -> None:
    out = await run_cli("run", "playbooks/examples/hello.yaml", "--server", url)

    assert out.returncode == 2
    assert one_line(out.stderr) == (f"noetl-stream: --server {url!r}: the HTTP API's URL starts "
                                    "with http:// or https://")


@pytest.mark.parametrize("command", [("status", "x"), ("run", "playbooks/examples/hello.yaml")])
async def test_an_unreachable_nats_is_a_one_line_infrastructure_error(
        command: tuple[str, ...]) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    out = await run_cli(*command, "--nats-url", f"nats://127.0.0.1:{port}")

    assert out.returncode == 3
    # The refused attempts before it are logged only with -v: the error line says it all.
    line = one_line(out.stderr)
    assert line.startswith("noetl-stream: ") and "cannot reach NATS" in line


@pytest.mark.parametrize("command", [("watch",), ("logs",), ("status",), ("cancel",),
                                     ("restart",), ("replay",), ("verify",), ("signal", "go")])
async def test_an_id_no_execution_can_have_is_a_one_line_usage_error(
        command: tuple[str, ...], bus: Bus, nats_server: NatsServer) -> None:
    verb, *rest = command
    out = await run_cli(verb, "bad-id!", *rest, "--nats-url", nats_server.url)

    assert out.returncode == 2, out.stderr
    assert one_line(out.stderr) == (
        "noetl-stream: no execution 'bad-id!' is known: an execution id is letters, digits, "
        "'-' and '_', at most 128 characters")


async def test_a_busy_http_port_is_a_one_line_infrastructure_error(nats_server: NatsServer) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = await run_cli("server", "--nats-url", nats_server.url, "--http", f"127.0.0.1:{port}")

    assert out.returncode == 3
    assert "Traceback" not in out.stderr
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith(f"noetl-stream: cannot serve the HTTP API on 127.0.0.1:{port}")
    assert "in use" in last


async def test_signal_refuses_unknown_executions_and_names_nobody_listens_for(
        bus: Bus, nats_server: NatsServer) -> None:
    url = ["--nats-url", nats_server.url]
    unknown = await run_cli("signal", "nosuch", "approve", *url)
    assert unknown.returncode == 2
    assert "no execution nosuch is known" in one_line(unknown.stderr)

    async with run_services(bus, python_children=1):
        run = asyncio.create_task(submit_and_watch(
            bus, playbook_text=LISTENING, playbook_file="listening.yaml", payload={},
            on_event=lambda e: None, execution_id="sig1", timeout_s=60))

        async def listening() -> None:
            out = await run_cli("status", "sig1", "--json", *url)
            assert '"approval"' in out.stdout

        await assert_eventually(listening, timeout_s=20)
        wrong = await run_cli("signal", "sig1", "aprove", *url)
        assert wrong.returncode == 2
        assert "listens for signal.aprove" in wrong.stderr and "approve" in wrong.stderr
        forced = await run_cli("signal", "sig1", "aprove", "--force", *url)
        assert forced.returncode == 0, forced.stderr

        sent = await run_cli("signal", "sig1", "approve", *url)
        assert sent.returncode == 0, sent.stderr
        final = await asyncio.wait_for(run, 20)
        assert final["status"] == "completed"

    ended = await run_cli("signal", "sig1", "approve", *url)
    assert ended.returncode == 2
    assert "already completed" in ended.stderr


async def test_verbose_works_after_the_subcommand() -> None:
    quiet = await run_cli("run", "playbooks/examples/hello.yaml", "--quiet")
    verbose = await run_cli("run", "playbooks/examples/hello.yaml", "--quiet", "-vv")

    assert quiet.returncode == verbose.returncode == 0, verbose.stderr
    assert "DEBUG" not in quiet.stderr
    assert "DEBUG" in verbose.stderr


def test_no_color_turns_escape_codes_off(monkeypatch: pytest.MonkeyPatch) -> None:
    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    event = {"event_type": "step.done", "step": "start", "execution_id": "x"}
    coloured = Tty()
    ProgressPrinter(coloured)(event)
    monkeypatch.setenv("NO_COLOR", "1")
    plain = Tty()
    ProgressPrinter(plain)(event)

    assert "\033[" in coloured.getvalue()
    assert "\033[" not in plain.getvalue() and "start" in plain.getvalue()


@pytest.mark.parametrize(("shell", "marker"), [("bash", "complete -o nosort -F"),
                                               ("zsh", "compdef"), ("fish", "complete --no-files --command")])
async def test_completion_scripts(shell: str, marker: str) -> None:
    out = await run_cli("completion", shell)

    assert out.returncode == 0, out.stderr
    assert marker in out.stdout and "_NOETL_STREAM_COMPLETE" in out.stdout


async def test_nats_takes_a_port_and_a_store(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    store = tmp_path / "store"
    proc = await asyncio.create_subprocess_exec(
        str(CLI), "nats", "--port", str(port), "--store", str(store),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        line = await asyncio.wait_for(proc.stderr.readline(), 20)  # type: ignore[union-attr]
        assert f"127.0.0.1:{port}" in line.decode()
        assert (store / "jetstream").is_dir()
    finally:
        proc.send_signal(signal.SIGINT)
        await asyncio.wait_for(proc.wait(), 20)


async def test_nats_on_a_port_something_listens_on_is_a_one_line_infrastructure_error(
        nats_server: NatsServer, bus: Bus, tmp_path: Path) -> None:
    # Before, the readiness wait took the other listener for the new server, which had died on
    # its bind: the command said it ran and waited for Ctrl-C.
    out = await run_cli("nats", "--port", str(nats_server.port), "--store", str(tmp_path / "s"),
                        timeout_s=30)

    assert out.returncode == 3
    assert one_line(out.stderr) == (f"noetl-stream: cannot start nats-server on port "
                                    f"{nats_server.port}: something already listens on "
                                    f"127.0.0.1:{nats_server.port}")


@pytest.mark.parametrize("command", [("worker", "--pool", "bad pool"),
                                     ("init", "--pool", "default", "--pool", "a.b")])
async def test_a_pool_name_that_is_no_subject_token_is_a_one_line_usage_error(
        command: tuple[str, ...], nats_server: NatsServer, bus: Bus) -> None:
    out = await run_cli(*command, "--nats-url", nats_server.url)

    assert out.returncode == 2
    bad = command[-1]
    assert one_line(out.stderr) == (f"noetl-stream: --pool {bad!r}: a pool name is letters, "
                                    "digits, '-' and '_', at most 128 characters")


async def test_ctrl_c_in_run_exits_130_and_says_the_execution_goes_on(
        bus: Bus, nats_server: NatsServer, tmp_path: Path) -> None:
    playbook = tmp_path / "listening.yaml"
    playbook.write_text(LISTENING)
    async with run_services(bus, python_children=1):
        proc = await asyncio.create_subprocess_exec(
            str(CLI), "run", str(playbook), "--nats-url", nats_server.url,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})
        assert proc.stderr is not None
        seen = b""
        while b"approval" not in seen:
            seen += await asyncio.wait_for(proc.stderr.readline(), 20)
        proc.send_signal(signal.SIGINT)
        rest = await asyncio.wait_for(proc.stderr.read(), 20)
        code = await proc.wait()

    text = rest.decode()
    assert code == 130, text
    assert "Aborted" not in text and "Traceback" not in text
    assert "keeps running" in text
    assert "noetl-stream watch " in text and "noetl-stream cancel " in text


async def test_list_commands_print_a_header_row() -> None:
    out = await run_cli("tools")

    assert out.returncode == 0
    assert out.stdout.splitlines()[0].split() == ["KIND", "ORIGIN"]


@pytest.mark.parametrize("verb", ["show", "purge"])
async def test_dlq_show_of_a_missing_id_is_a_usage_error(verb: str, nats_server: NatsServer,
                                                         bus: Bus) -> None:
    out = await run_cli("dlq", verb, "99", "--nats-url", nats_server.url)

    assert out.returncode == 2
    assert one_line(out.stderr) == "noetl-stream: no dead letter 99"


@pytest.mark.parametrize("verb", ["pause", "resume", "fire", "delete"])
async def test_a_name_no_trigger_can_have_is_a_one_line_usage_error(
        verb: str, nats_server: NatsServer, bus: Bus) -> None:
    out = await run_cli("trigger", verb, "nightly.v2", "--nats-url", nats_server.url)

    assert out.returncode == 2
    assert one_line(out.stderr) == ("noetl-stream: no trigger named 'nightly.v2': a trigger's name "
                                    "is letters, digits, '-' and '_', at most 128 characters")


def test_the_cli_module_runs_under_this_interpreter() -> None:
    assert Path(sys.executable).with_name("noetl-stream") == CLI
