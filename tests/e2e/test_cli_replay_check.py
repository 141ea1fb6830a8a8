"""`noetl-stream replay-check` as a user runs it before shipping a playbook change: a recorded
execution replayed against the unchanged playbook routes the same; against a version whose guard
changed, the arc it now takes and the steps it no longer reaches are named; a guard that now
fails is named with its error; `--recent N` finds the playbook's latest executions; an unknown
id is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli import run_cli

from noetl_stream.bus.connection import Bus
from noetl_stream.bus.nats_server import NatsServer
from noetl_stream.services import run_services
from playbook_files import read_playbook

pytestmark = pytest.mark.e2e


def version(tmp_path: Path, name: str, guard: str) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(read_playbook("e2e", "shadow_guard.yaml", guard=guard))
    return path


async def test_replay_check_names_where_a_changed_guard_routes_differently(
        bus: Bus, nats_server: NatsServer, tmp_path: Path) -> None:
    url = ["--nats-url", nats_server.url]
    recorded = version(tmp_path, "recorded", "start.n > 5")
    async with run_services(bus, python_children=1):
        ran = await run_cli("run", str(recorded), "--json", "--quiet", *url)
        assert ran.returncode == 0, ran.stderr
        execution_id = str(ran.summary["execution_id"])

    same = await run_cli("replay-check", str(recorded), "--against", execution_id, *url)
    assert same.returncode == 0, same.stderr
    assert same.stdout.splitlines()[0].startswith(f"{execution_id}: routes the same over its ")
    assert same.stdout.splitlines()[-1] == "1 of 1 execution(s) route the same"

    changed = version(tmp_path, "changed", "start.n > 50")
    differs = await run_cli("replay-check", str(changed), "--against", execution_id, *url)
    assert differs.returncode == 1, differs.stderr
    assert differs.stdout.splitlines()[0] == (
        f'{execution_id}: routes differently after step.done of step "start" (recorded event 1): '
        'the recorded run sends a command to "big", step.started "big"; this version sends a '
        'command to "small", step.started "small"; no longer reached: "big", "report"; '
        'newly reached: "small"')

    failing = version(tmp_path, "failing", "start.n.size > 5")
    errors = await run_cli("replay-check", str(failing), "--recent", "1", *url)
    assert errors.returncode == 1, errors.stderr
    assert f'{execution_id}: routes differently after step.done of step "start"' in errors.stdout
    assert 'a template now errors at "start": ' in errors.stdout

    # An id nothing was committed for is bad input (exit 2), not an execution that routes
    # differently (exit 1).
    unknown = await run_cli("replay-check", str(recorded), "--against", execution_id,
                            "--against", "4242424242", *url)
    assert unknown.returncode == 2, unknown.stderr
    assert unknown.stdout == ""
    assert unknown.stderr == ("noetl-stream: no committed state of execution 4242424242 (unknown, "
                              "or removed by retention); nothing was checked\n")
