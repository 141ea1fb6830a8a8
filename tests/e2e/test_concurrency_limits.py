"""Concurrency limits, execution timeouts and SLAs against real processes: nats-server, and
`noetl-stream server` and `worker` each a process of its own (the server is killed -9 in the
middle of some). Requests are published straight on the request subject, as any NATS client
would. What "running at once" means is measured where the work happens: each task records the
worker's wall clock when it began and ended, and no two of those intervals may overlap.
"""

from __future__ import annotations

import asyncio
import itertools
import signal
from pathlib import Path
from typing import Any

import pytest
from cli import run_cli
from processes import Processes

from noetl_stream import jsonutil
from noetl_stream.bus.connection import Bus
from noetl_stream.bus.nats_server import NatsServer
from noetl_stream.server.submission import submit
from noetl_stream.testing.events import stored_messages
from noetl_stream.testing.waiting import assert_eventually

pytestmark = pytest.mark.e2e


def playbook(name: str, concurrency: str, sleep_s: float, extra: str = "") -> str:
    return f"""apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: {name}, path: tests/{name}}}
workload: {{customer: acme}}
executor:
  spec:
    concurrency: {concurrency}
{extra}workflow:
  - step: start
    tool:
      kind: python
      code: |
        import time
        began = time.time()
        time.sleep({sleep_s})
        result = {{"began": began, "ended": time.time()}}
"""



async def events_of(bus: Bus, event_type: str) -> list[dict[str, Any]]:
    """Every stored event of a type, in stream order."""
    return [jsonutil.loads(data) for _, data in
            await stored_messages(bus.js, f"noetl.events.*.{event_type}")]


async def ended(bus: Bus, ids: list[str]) -> dict[str, dict[str, Any]]:
    out = {}
    for etype in ("execution.completed", "execution.failed", "execution.cancelled"):
        for event in await events_of(bus, etype):
            if event["execution_id"] in ids:
                out[event["execution_id"]] = event
    return out


async def all_ended(bus: Bus, ids: list[str], timeout_s: float) -> dict[str, dict[str, Any]]:
    async def check() -> dict[str, dict[str, Any]]:
        found = await ended(bus, ids)
        assert set(found) == set(ids), f"ended: {sorted(found)}"
        return found
    result: dict[str, dict[str, Any]] = await assert_eventually(check, timeout_s=timeout_s,
                                                                  interval_s=0.5)
    return result


def intervals(ends: dict[str, dict[str, Any]]) -> list[tuple[float, float, str]]:
    return sorted((e["result"]["began"], e["result"]["ended"], execution_id)
                  for execution_id, e in ends.items() if e["status"] == "completed")


def assert_never_two_at_once(spans: list[tuple[float, float, str]]) -> None:
    for (_, end, first), (begin, _, second) in itertools.pairwise(spans):
        assert begin >= end, f"{second} began at {begin} before {first} ended at {end}"


async def submit_all(bus: Bus, text: str, ids: list[str]) -> None:
    for execution_id in ids:
        await submit(bus, playbook_text=text, playbook_file="limited.yaml", payload={},
                     execution_id=execution_id)


@pytest.mark.timeout(180)
async def test_limit_1_runs_five_requests_one_at_a_time_in_arrival_order(
        bus: Bus, procs: Processes) -> None:
    text = playbook("one_at_a_time", "{limit: 1}", 1.0)
    ids = [f"q{n}" for n in range(5)]
    await submit_all(bus, text, ids)
    ends = await all_ended(bus, ids, timeout_s=90)

    assert {e["status"] for e in ends.values()} == {"completed"}
    spans = intervals(ends)
    assert len(spans) == 5
    assert_never_two_at_once(spans)
    # In line in the order they asked for a slot (the stream's order of their requests).
    asked = [e["execution_id"] for e in await events_of(bus, "concurrency.requested")]
    assert sorted(asked) == ids
    assert [execution_id for _, _, execution_id in spans] == asked
    admitted = [e["execution_id"] for e in await events_of(bus, "execution.admitted")]
    assert admitted == asked  # each admitted exactly once


@pytest.mark.timeout(360)
async def test_limit_1_holds_across_a_server_killed_9_and_every_execution_completes(
        bus: Bus, procs: Processes) -> None:
    text = playbook("through_a_kill", "{limit: 1}", 1.5)
    ids = [f"k{n}" for n in range(5)]
    await submit_all(bus, text, ids)
    # Killed twice: once while the third runs, once just as the fourth ends (its release and the
    # fifth's admission in flight).
    for server, done, later in (("server", 2, "server-2"), ("server-2", 4, "server-3")):
        async def some_done(count: int = done) -> None:
            assert len(await ended(bus, ids)) >= count

        await assert_eventually(some_done, timeout_s=150, interval_s=0.1)
        await procs.stop(server, signal.SIGKILL)
        await asyncio.sleep(1.0)
        await procs.start(later, "server")
    ends = await all_ended(bus, ids, timeout_s=150)

    assert {e["status"] for e in ends.values()} == {"completed"}, ends
    spans = intervals(ends)
    assert len(spans) == 5
    assert_never_two_at_once(spans)
    admitted = [e["execution_id"] for e in await events_of(bus, "execution.admitted")]
    assert sorted(admitted) == ids  # once each, whatever was redelivered


@pytest.mark.timeout(120)
async def test_skip_ends_the_new_execution_cancelled_with_the_reason(
        bus: Bus, procs: Processes) -> None:
    text = playbook("skipping", "{limit: 1, key: \"{{ workload.customer }}\", on_limit: skip}",
                    3.0)
    await submit_all(bus, text, ["s1"])

    async def first_admitted() -> None:
        assert [e["execution_id"] for e in await events_of(bus, "execution.admitted")] == \
            ["s1"]

    await assert_eventually(first_admitted, timeout_s=30, interval_s=0.2)
    await submit_all(bus, text, ["s2"])
    ends = await all_ended(bus, ["s1", "s2"], timeout_s=60)

    assert ends["s1"]["status"] == "completed"
    assert ends["s2"]["status"] == "cancelled"
    reason = ends["s2"]["error"]["reason"]
    assert reason == ("not started: 1 execution(s) of tests/skipping[acme] already run and the "
                      "concurrency limit is 1 (on_limit: skip)")
    assert ends["s2"]["error"]["requested_by"] == "concurrency"
    assert ends["s2"]["steps"] == {}  # its first step never ran


@pytest.mark.timeout(120)
async def test_run_of_a_skipped_execution_says_skipped_naming_the_limit_and_never_waiting(
        bus: Bus, nats_server: NatsServer, procs: Processes, tmp_path: Path) -> None:
    text = playbook("run_skipping", "{limit: 1, key: \"{{ workload.customer }}\", on_limit: skip}",
                    0.2)
    path = tmp_path / "run_skipping.yaml"
    path.write_text(text)
    url = ("--nats-url", nats_server.url)
    free = await run_cli("run", str(path), *url, timeout_s=60)  # nothing holds the slot
    assert free.returncode == 0, free.stderr
    assert "waiting for a slot" not in free.stderr
    assert "admitted: it holds a slot" in free.stderr

    path.write_text(text.replace("time.sleep(0.2)", "time.sleep(4.0)"))
    await submit_all(bus, path.read_text(), ["holder"])

    async def holder_admitted() -> None:
        assert "holder" in [e["execution_id"] for e in await events_of(bus, "execution.admitted")]

    await assert_eventually(holder_admitted, timeout_s=30, interval_s=0.2)
    skipped = await run_cli("run", str(path), *url, timeout_s=60)

    assert skipped.returncode == 1, skipped.stderr
    assert "waiting for a slot" not in skipped.stderr
    lines = [line.split(None, 1)[1] for line in skipped.stderr.splitlines()
             if line.strip() and line.split()[0].endswith("s")]
    assert lines[-1] == ("skipped  not started: 1 execution(s) of tests/run_skipping[acme] already "
                         "run and the concurrency limit is 1 (on_limit: skip)"), skipped.stderr
    assert not any(line.startswith("cancelled") for line in lines), skipped.stderr
    await all_ended(bus, ["holder"], timeout_s=60)


@pytest.mark.timeout(120)
async def test_cancel_oldest_cancels_the_running_one_and_the_new_one_runs(
        bus: Bus, procs: Processes) -> None:
    # Two versions of one playbook (its path names the group): the old one would run a minute.
    text = playbook("newest_wins", "{limit: 1, on_limit: cancel_oldest}", 2.0)
    slow = playbook("newest_wins", "{limit: 1, on_limit: cancel_oldest}", 60.0)
    await submit(bus, playbook_text=slow, playbook_file="limited.yaml", payload={},
                 execution_id="old")

    async def old_running() -> None:
        assert [e["execution_id"] for e in await events_of(bus, "task.started")] == ["old"]

    await assert_eventually(old_running, timeout_s=30, interval_s=0.2)
    await submit(bus, playbook_text=text, playbook_file="limited.yaml", payload={},
                 execution_id="new")
    ends = await all_ended(bus, ["old", "new"], timeout_s=60)

    assert ends["old"]["status"] == "cancelled"
    assert ends["old"]["error"]["reason"] == (
        "cancelled to make room for a newer execution (new): concurrency limit 1 reached "
        "(on_limit: cancel_oldest)")
    assert ends["new"]["status"] == "completed"
    # The new one began only once the old one had ended.
    assert ends["new"]["result"]["began"] >= ends["old"]["timestamp"]


@pytest.mark.timeout(180)
async def test_a_triggers_concurrency_limits_the_executions_it_starts(
        nats_server: NatsServer, bus: Bus, procs: Processes, tmp_path: Path) -> None:
    url = nats_server.url
    # The playbook has no limit of its own: the trigger's applies to what it starts.
    text = playbook("sleeper", "{}", 1.0).replace("    concurrency: {}\n", "    labels: {}\n")
    (tmp_path / "sleeper.yaml").write_text(text)
    out = await run_cli("register", str(tmp_path / "sleeper.yaml"), "--nats-url", url)
    assert out.returncode == 0, out.stderr
    (tmp_path / "jobs.yaml").write_text(
        "apiVersion: noetl.io/v2\nkind: Trigger\nmetadata: {name: jobs}\nspec:\n"
        "  playbook: tests/sleeper\n  payload: {job: \"{{ message.data.job }}\"}\n"
        "  on: {subject: \"jobs.created\"}\n  concurrency: {limit: 1}\n")
    out = await run_cli("trigger", "apply", str(tmp_path / "jobs.yaml"), "--nats-url", url)
    assert out.returncode == 0, out.stderr

    async def listening() -> None:
        await bus.js.stream_info("NOETL_ON_jobs")

    await assert_eventually(listening, timeout_s=30, interval_s=0.3)
    for job in range(3):
        await bus.nc.publish("jobs.created", jsonutil.dumps({"job": job}))
    await bus.nc.flush()

    async def three_asked() -> list[str]:
        asked = await events_of(bus, "concurrency.requested")
        assert len(asked) == 3
        assert {(e["group"], e["limit"]) for e in asked} == {("tests/sleeper", 1)}
        return [e["execution_id"] for e in asked]

    ids = await assert_eventually(three_asked, timeout_s=60, interval_s=0.5)
    ends = await all_ended(bus, ids, timeout_s=90)
    assert {e["status"] for e in ends.values()} == {"completed"}
    assert_never_two_at_once(intervals(ends))


# -- deadlines of a whole execution ------------------------------------------------------------
def deadline_playbook(name: str, spec: str, sleep_s: float) -> str:
    return f"""apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: {name}, path: tests/{name}}}
executor:
  spec:
{spec}workflow:
  - step: start
    tool: {{kind: noop}}
    next: work
  - step: work
    tool:
      kind: python
      code: |
        import time
        time.sleep({sleep_s})
        result = "slept"
"""


@pytest.mark.timeout(120)
async def test_the_execution_timeout_fires_on_nats_time_across_a_server_killed_9(
        bus: Bus, procs: Processes) -> None:
    text = deadline_playbook("bounded", "    timeout: 4s\n", 60.0)
    await submit(bus, playbook_text=text, playbook_file="bounded.yaml", payload={},
                 execution_id="bounded1")

    async def working() -> None:
        assert "work" in [e["step"] for e in await events_of(bus, "task.started")]

    await assert_eventually(working, timeout_s=30, interval_s=0.2)
    await procs.stop("server", signal.SIGKILL)
    await asyncio.sleep(6.0)  # the deadline passes while no server runs
    await procs.start("server-2", "server")
    ends = await all_ended(bus, ["bounded1"], timeout_s=60)

    end = ends["bounded1"]
    assert end["status"] == "failed"
    assert end["error"]["kind"] == "timeout"
    assert end["error"]["message"] == ("the execution ran longer than its timeout of 4s "
                                       "(executor.spec.timeout)")
    assert end["steps"]["work"]["status"] == "failed"
    (started,) = [e for e in await events_of(bus, "execution.started")]
    (fired,) = [e for e in await events_of(bus, "timer.fired")
                if e["timer_id"] == "watchdog.execution.timeout"]
    # Due 4 s after the start, rounded up to nats-server's next whole second.
    assert 4.0 <= fired["fire_at"] - started["timestamp"] <= 5.0
    (withdrawn,) = await events_of(bus, "step.timeout")
    assert withdrawn["step"] == "work"


@pytest.mark.timeout(120)
async def test_sla_missed_is_published_once_on_the_executions_subject_and_it_completes(
        bus: Bus, procs: Processes) -> None:
    text = deadline_playbook("late", "    sla: {max_duration: 2s}\n", 4.0)
    await submit(bus, playbook_text=text, playbook_file="late.yaml", payload={},
                 execution_id="late1")
    ends = await all_ended(bus, ["late1"], timeout_s=60)

    assert ends["late1"]["status"] == "completed"
    messages = await stored_messages(bus.js, "noetl.events.late1.sla.missed")
    assert len(messages) == 1
    missed = jsonutil.loads(messages[0][1])
    assert (missed["execution_id"], missed["playbook"], missed["max_duration_s"]) == \
        ("late1", "tests/late", 2.0)
    assert 2.0 <= missed["elapsed_s"] < 4.5


def most_at_once(spans: list[tuple[float, float, str]]) -> int:
    """The most intervals open at one instant (an end before a begin at the same instant)."""
    points = sorted([(begin, 1) for begin, _, _ in spans] + [(end, -1) for _, end, _ in spans])
    most = running = 0
    for _, step in points:
        running += step
        most = max(most, running)
    return most


@pytest.mark.timeout(180)
async def test_two_servers_never_hand_out_more_slots_than_the_limit(
        bus: Bus, procs: Processes) -> None:
    await procs.start("server-b", "server")  # a second server shares every durable consumer
    text = playbook("shared", "{limit: 2}", 1.0)
    ids = [f"m{n}" for n in range(8)]
    await submit_all(bus, text, ids)
    ends = await all_ended(bus, ids, timeout_s=120)

    assert {e["status"] for e in ends.values()} == {"completed"}
    spans = intervals(ends)
    assert len(spans) == 8
    assert most_at_once(spans) == 2  # the limit, and used
    admitted = [e["execution_id"] for e in await events_of(bus, "execution.admitted")]
    assert sorted(admitted) == ids
