"""`verify` holds for an execution under a concurrency limit and a timeout once its timers have
fired: the timeout armed at admission is a schedule nats-server fires (and then drops) after the
execution ended, and the rebuild must read the time the router set it, not when it fired.
Real nats-server, `noetl-stream server` and `worker` processes.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from cli import run_cli
from processes import Processes

from noetl_stream.bus.connection import Bus
from noetl_stream.bus.nats_server import NatsServer
from noetl_stream.server.verify import read_log
from noetl_stream.testing.waiting import assert_eventually

pytestmark = pytest.mark.e2e

PLAYBOOK = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: limited, path: tests/limited}
executor:
  spec:
    concurrency: {limit: 1}
    timeout: 2s
    sla: {max_duration: 1s}
workflow:
  - step: start
    tool: {kind: python, code: "result = 1"}
"""


async def limited_run_whose_timers_fired(nats_server: NatsServer, bus: Bus, tmp_path: Path) -> str:
    """The id of an execution of PLAYBOOK, once both its deadline timers fired after its end."""
    book = tmp_path / "limited.yaml"
    book.write_text(PLAYBOOK)
    out = await run_cli("run", str(book), "--json", "--nats-url", nats_server.url)
    assert out.returncode == 0, out.stderr
    execution_id = out.stdout.split('"execution_id":"', 1)[1].split('"', 1)[0]

    async def timers_fired() -> None:
        fired = [e for e in await read_log(bus, execution_id) if e["event_type"] == "timer.fired"]
        assert len(fired) == 2, fired  # the SLA's and the timeout's, after the end

    await assert_eventually(timers_fired, timeout_s=30, interval_s=0.5)
    return execution_id


async def test_verify_holds_after_the_admission_timeout_timer_fired(
        procs: Processes, nats_server: NatsServer, bus: Bus, tmp_path: Path) -> None:
    execution_id = await limited_run_whose_timers_fired(nats_server, bus, tmp_path)
    verified = await run_cli("verify", execution_id, "--nats-url", nats_server.url)
    assert verified.returncode == 0, verified.stderr
    assert "equal to its" in verified.stdout, verified.stdout


async def test_logs_say_a_timer_fired_after_the_end_did_nothing(
        procs: Processes, nats_server: NatsServer, bus: Bus, tmp_path: Path) -> None:
    execution_id = await limited_run_whose_timers_fired(nats_server, bus, tmp_path)
    out = await run_cli("logs", execution_id, "--nats-url", nats_server.url)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    ended = next(i for i, line in enumerate(lines) if "execution.completed" in line)
    fired = [line for line in lines[ended:] if "timer.fired" in line]
    assert sorted(line.split("timer.fired", 1)[1].strip() for line in fired) == [
        "timer watchdog.execution.sla  (the execution had ended: nothing to do)",
        "timer watchdog.execution.timeout  (the execution had ended: nothing to do)"], out.stdout
