"""Labels travel in `execution.started`, so an execution rebuilt from its events has them: against
nats-server, `noetl-stream server` and `worker` as separate processes. Labels come from
`run --label`, from a trigger's `labels:`, and from any NATS client's request.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli import PLAYBOOKS, run_cli
from processes import Processes

from noetl_stream import ids, jsonutil
from noetl_stream.bus.connection import Bus
from noetl_stream.bus.nats_server import NatsServer
from noetl_stream.server.verify import verify
from noetl_stream.testing.events import stored_messages
from noetl_stream.testing.waiting import assert_eventually

pytestmark = pytest.mark.e2e



async def started_event(bus: Bus, execution_id: str) -> dict[str, Any]:
    (event,) = [jsonutil.loads(data) for _, data in await stored_messages(
        bus.js, "noetl.events.*.execution.started") if jsonutil.loads(data)["execution_id"]
        == execution_id]
    return event


async def committed_labels(bus: Bus, execution_id: str) -> Any:
    kv = await bus.js.key_value("noetl_executions")
    return jsonutil.loads((await kv.get(execution_id)).value or b"{}").get("labels")


async def test_run_labels_are_in_the_start_event_and_the_execution_verifies(
        bus: Bus, procs: Processes, nats_server: NatsServer) -> None:
    out = await run_cli("run", str(PLAYBOOKS / "hello.yaml"), "--json", "--quiet",
                        "--label", "team=data", "--label", "env=prod night",
                        "--nats-url", nats_server.url)
    assert out.returncode == 0, out.stderr
    execution_id = str(out.summary["execution_id"])
    wanted = {"team": "data", "env": "prod night"}
    assert await committed_labels(bus, execution_id) == wanted
    assert (await started_event(bus, execution_id))["labels"] == wanted
    verdict = await verify(bus, execution_id)
    assert (verdict.outcome, verdict.detail) == ("equal", "")


async def test_a_bad_label_is_refused_before_anything_runs(bus: Bus, nats_server: NatsServer) -> None:
    out = await run_cli("run", str(PLAYBOOKS / "hello.yaml"), "--label", "team",
                        "--nats-url", nats_server.url)
    assert (out.returncode, out.stderr.strip()) == (
        2, "noetl-stream: --label expects KEY=VALUE, got 'team'")


async def test_a_triggers_labels_are_on_what_it_starts(
        bus: Bus, procs: Processes, nats_server: NatsServer, tmp_path: Path) -> None:
    url = ["--nats-url", nats_server.url]
    (tmp_path / "hello.yaml").write_text((PLAYBOOKS / "hello.yaml").read_text().replace(
        "  name: hello\n", "  name: hello\n  path: tests/hello\n"))
    assert (await run_cli("register", str(tmp_path / "hello.yaml"), *url)).returncode == 0
    (tmp_path / "trigger.yaml").write_text(
        "apiVersion: noetl.io/v2\nkind: Trigger\nmetadata: {name: labelled}\n"
        "spec:\n  playbook: tests/hello\n  labels: {source: nightly}\n  schedule: {every: 1h}\n")
    out = await run_cli("trigger", "apply", str(tmp_path / "trigger.yaml"), *url)
    assert out.returncode == 0, out.stderr
    assert (await run_cli("trigger", "pause", "labelled", *url)).returncode == 0
    out = await run_cli("trigger", "fire", "labelled", *url)
    assert out.returncode == 0, out.stderr
    execution_id = ids.derived_execution_id("trigger", "labelled", out.stdout.strip().rsplit(" ", 1)[-1])

    async def labelled() -> None:
        assert await committed_labels(bus, execution_id) == {"trigger": "labelled",
                                                             "source": "nightly"}

    await assert_eventually(labelled, timeout_s=30, interval_s=0.3)
    assert (await started_event(bus, execution_id))["labels"] == {"trigger": "labelled",
                                                                  "source": "nightly"}
    out = await run_cli("executions", "list", "--label", "trigger=labelled", "--json", *url)
    assert [row["execution_id"] for row in json.loads(out.stdout)] == [execution_id], out.stderr
