"""`executions list` tells an execution that waits for a slot under a concurrency limit from one
at work: its STATUS cell reads `waiting` (its status stays `running`) and `--json` names the group
and limit it waits under. Real nats-server, `noetl-stream server` and `worker` processes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli import run_cli
from processes import Processes

from noetl_stream.bus.nats_server import NatsServer
from noetl_stream.testing.waiting import assert_eventually

pytestmark = pytest.mark.e2e

# Each run holds its slot until the test creates the release file.
PLAYBOOK = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: one_by_one, path: tests/one_by_one}
workload: {release: none}
executor:
  spec:
    concurrency: {limit: 1}
workflow:
  - step: start
    tool:
      kind: python
      input: {release: "{{ workload.release }}"}
      code: |
        import os, time
        while not os.path.exists(release):
            time.sleep(0.1)
        result = 1
"""


async def test_a_waiting_execution_is_listed_as_waiting(procs: Processes, nats_server: NatsServer,
                                                        tmp_path: Path, shared_folder: Path) -> None:
    url = ["--nats-url", nats_server.url]
    book = tmp_path / "one_by_one.yaml"
    book.write_text(PLAYBOOK)
    release = shared_folder / "release"  # where the step's uid can look
    ids = []
    for _ in range(3):
        out = await run_cli("run", str(book), "--detach", "--set", f"release={release}", *url)
        assert out.returncode == 0, out.stderr
        ids.append(out.stdout.strip())

    async def one_runs_two_wait() -> dict[str, dict[str, object]]:
        out = await run_cli("executions", "list", "--json", *url)
        assert out.returncode == 0, out.stderr
        rows = {r["execution_id"]: r for r in json.loads(out.stdout)}
        assert all(rows[i]["status"] == "running" for i in ids)
        assert sorted(bool(rows[i]["waiting"]) for i in ids) == [False, True, True]
        return rows

    rows = await assert_eventually(one_runs_two_wait, timeout_s=30, interval_s=0.3)
    waiting = [i for i in ids if rows[i]["waiting"]]
    assert rows[waiting[0]]["waiting"] == {"group": "tests/one_by_one", "limit": 1}
    out = await run_cli("executions", "list", *url)
    cells = {line.split()[0]: line.split()[1] for line in out.stdout.splitlines()[1:]}
    assert sorted(cells[i] for i in ids) == ["running", "waiting", "waiting"], out.stdout

    out = await run_cli("executions", "list", "--status", "waiting", "--json", *url)
    assert sorted(r["execution_id"] for r in json.loads(out.stdout)) == sorted(waiting), out.stderr
    out = await run_cli("logs", waiting[0], *url)
    requested = [line for line in out.stdout.splitlines() if "concurrency.requested" in line]
    assert [line.split("concurrency.requested", 1)[1].strip() for line in requested] == [
        "at most 1 of tests/one_by_one run at once (on_limit: queue)"], out.stdout
    release.touch()

    async def all_done() -> None:
        out = await run_cli("executions", "list", "--json", *url)
        rows = {r["execution_id"]: r for r in json.loads(out.stdout)}
        assert [rows[i]["status"] for i in ids] == ["completed"] * 3
        assert not any(rows[i]["waiting"] for i in ids)

    await assert_eventually(all_done, timeout_s=60, interval_s=0.5)
