"""`executions list`, `logs` and `watch` as a user runs them, against a server and worker on the
test's nats-server: the list filters and has a header, logs show each task's printed output,
watch of a finished execution shows the durations it had, and unknown ids and steps exit 2.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from cli import run_cli

from noetl_stream.bus.connection import Bus
from noetl_stream.bus.nats_server import NatsServer
from noetl_stream.services import run_services, submit_and_watch
from playbook_files import read_playbook

pytestmark = pytest.mark.e2e

OBSERVED = (Path(__file__).parents[1] / "integration" / "playbooks" / "observed.yaml").read_text()
SLOW = read_playbook("e2e", "cli_executions_logs_slow.yaml")


async def test_list_logs_and_watch_read_finished_executions(bus: Bus, nats_server: NatsServer) -> None:
    url = ["--nats-url", nats_server.url]
    async with run_services(bus, python_children=1):
        ok = await submit_and_watch(bus, playbook_text=OBSERVED, playbook_file="observed.yaml",
                                    payload={}, on_event=lambda e: None, timeout_s=30)
        bad = await submit_and_watch(bus, playbook_text=OBSERVED, playbook_file="observed.yaml",
                                     payload={"fail": True}, on_event=lambda e: None, timeout_s=30,
                                     labels={"team": "data", "tier": "gold"})
        slow = await submit_and_watch(bus, playbook_text=SLOW, playbook_file="slow.yaml",
                                      payload={}, on_event=lambda e: None, timeout_s=30)
    ok_id, bad_id, slow_id = ok["execution_id"], bad["execution_id"], slow["execution_id"]

    listed = await run_cli("executions", "list", *url)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].split() == ["EXECUTION_ID", "STATUS", "PLAYBOOK", "STARTED", "(UTC)",
                                "DURATION", "PARENT"]
    assert [line.split()[0] for line in lines[1:]] == [slow_id, bad_id, ok_id]  # newest first
    slow_row = lines[1].split()
    assert slow_row[1:3] == ["completed", "tests/slow"]
    assert 0.6 <= float(slow_row[5].rstrip("s")) < 10

    failed = await run_cli("executions", "list", "--status", "failed", "--json", *url)
    assert [e["execution_id"] for e in json.loads(failed.stdout)] == [bad_id]
    by_playbook = await run_cli("executions", "list", "--playbook", "observed", "--limit", "1",
                                "--json", *url)
    assert [e["execution_id"] for e in json.loads(by_playbook.stdout)] == [bad_id]
    for wanted, ids in ((["team"], [bad_id]), (["team=data", "tier=gold"], [bad_id]),
                        (["team=data", "tier=silver"], []), (["team=web"], [])):
        labelled = await run_cli("executions", "list", *[f"--label={w}" for w in wanted],
                                 "--json", *url)
        assert [e["execution_id"] for e in json.loads(labelled.stdout)] == ids, wanted
    recent = await run_cli("executions", "list", "--since", "10m", "--json", *url)
    assert len(json.loads(recent.stdout)) == 3
    future = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + 3600))
    none = await run_cli("executions", "list", "--since", future, "--json", *url)
    assert json.loads(none.stdout) == []
    nonsense = await run_cli("executions", "list", "--since", "yesterday-ish", *url)
    assert nonsense.returncode == 2 and "--since" in nonsense.stderr

    logs = await run_cli("logs", bad_id, *url)
    assert logs.returncode == 0, logs.stderr
    out = logs.stdout
    assert re.search(r"^\d{4}-\d\d-\d\dT[\d:.]+Z  execution\.started  tests/observed$", out, re.M)
    assert "    [say stdout] starting 3 numbers" in out
    assert "    [say stderr] a warning" in out
    assert "    [square_task #1 stdout] squaring 2" in out
    assert "loop.iteration.failed  square[1]" in out and "two is not welcome" in out
    assert out.rstrip().splitlines()[-1].split()[1] == "execution.failed"

    only_start = await run_cli("logs", bad_id, "--step", "start", *url)
    steps = {line.split()[2] for line in only_start.stdout.splitlines() if not line.startswith(" ")}
    assert steps == {"start"}
    misspelt = await run_cli("logs", bad_id, "--step", "strat", *url)
    assert misspelt.returncode == 2 and misspelt.stdout == ""
    assert misspelt.stderr == (f'noetl-stream: execution {bad_id} has no event of step "strat"; '
                               'did you mean "start"?\n')

    as_json = await run_cli("logs", ok_id, "--json", *url)
    events = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert events[0]["event_type"] == "execution.started"
    assert events[-1]["event_type"] == "execution.completed"

    watched = await run_cli("watch", slow_id, *url)
    assert watched.returncode == 0, watched.stderr
    done = next(line for line in watched.stdout.splitlines() if "✓ start" in line)
    elapsed, took = re.match(r"\s*([\d.]+)s\s+✓ start\s+(\d+) ms", done).groups()  # type: ignore[union-attr]
    assert float(elapsed) >= 0.6 and int(took) >= 600  # the durations it had, not ~0

    for command in ("logs", "watch"):
        unknown = await run_cli(command, "4242424242", *url, timeout_s=20)
        assert unknown.returncode == 2, (command, unknown.stderr)
        assert "no execution 4242424242 is known" in unknown.stderr


async def test_logs_follow_prints_new_events_until_the_end(bus: Bus, nats_server: NatsServer) -> None:
    import asyncio

    from noetl_stream.bus.signals import publish_signal

    approval = (Path(__file__).parents[2] / "playbooks" / "examples" / "approval.yaml").read_text()
    url = ["--nats-url", nats_server.url]
    async with run_services(bus, python_children=1):
        seen: list[str] = []
        run = asyncio.create_task(submit_and_watch(
            bus, playbook_text=approval, playbook_file="approval.yaml", payload={},
            execution_id="4711", on_event=lambda e: seen.append(e["event_type"]), timeout_s=60))
        while "timer.scheduled" not in seen:
            await asyncio.sleep(0.05)
        follower = asyncio.create_task(run_cli("logs", "4711", "--follow", *url, timeout_s=60))
        await asyncio.sleep(1.5)  # it has printed what was there and waits for more
        assert not follower.done()
        await publish_signal(bus, "4711", "approve", {"user": "ada"})
        followed = await follower
        assert (await run)["status"] == "completed"
    assert followed.returncode == 0, followed.stderr
    types = [line.split()[1] for line in followed.stdout.splitlines() if not line.startswith(" ")]
    assert types[0] == "execution.started" and types[-1] == "execution.completed"
    assert "signal.approve" in types and types.index("timer.scheduled") < types.index("signal.approve")


async def test_list_with_nothing_to_show_says_so_naming_the_filters(
        bus: Bus, nats_server: NatsServer) -> None:
    url = ["--nats-url", nats_server.url]
    empty = await run_cli("executions", "list", *url)
    assert empty.returncode == 0, empty.stderr
    assert empty.stdout == "no executions\n"

    async with run_services(bus, python_children=1):
        await submit_and_watch(bus, playbook_text=OBSERVED, playbook_file="observed.yaml",
                               payload={}, on_event=lambda e: None, timeout_s=30)
    filtered = await run_cli("executions", "list", "--status", "failed", "--status", "waiting",
                             "--playbook", "observed", "--label", "team=data", "--since", "1h",
                             *url)
    assert filtered.returncode == 0, filtered.stderr
    assert filtered.stdout == ("no executions match --status failed --status waiting --playbook "
                               "observed --label team=data --since 1h\n")
    as_json = await run_cli("executions", "list", "--status", "failed", "--json", *url)
    assert json.loads(as_json.stdout) == []
