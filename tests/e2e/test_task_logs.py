"""`worker --log-format json` writes one line per task start, end and failure, with the
execution, step, task, attempt and duration, without -v: what a log shipper reads."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import Any

import pytest
from cli import CLI, PLAYBOOKS, run_cli

from noetl_stream.bus.nats_server import NatsServer
from noetl_stream.testing.waiting import assert_eventually

pytestmark = pytest.mark.e2e


def task_lines(path: Path) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{")]
    return [line for line in lines if line.get("logger") == "noetl_stream.tasks"]


async def test_a_json_worker_log_has_a_line_per_task_start_end_and_failure(
        nats_server: NatsServer, tmp_path: Path) -> None:
    url = nats_server.url
    err = tmp_path / "worker.stderr"
    with err.open("wb") as stderr:
        server = await asyncio.create_subprocess_exec(
            str(CLI), "server", "--nats-url", url, stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL)
        worker = await asyncio.create_subprocess_exec(
            str(CLI), "worker", "--nats-url", url, "--log-format", "json",
            stdout=asyncio.subprocess.DEVNULL, stderr=stderr)
    try:
        out = await run_cli("run", str(PLAYBOOKS / "fail_unhandled.yaml"), "--nats-url", url,
                            "--json", "--quiet")
        assert out.returncode == 1
        execution_id = out.summary["execution_id"]

        def logged() -> list[tuple[str, str]]:
            seen = [(line["message"].split(":")[0], line["step"]) for line in task_lines(err)]
            assert len(seen) == 4, err.read_text()
            return seen

        seen = await assert_eventually(logged, timeout_s=10, interval_s=0.2)
    finally:
        for proc in (worker, server):
            proc.send_signal(signal.SIGTERM)
            await proc.wait()

    assert seen == [("task started", "start"), ("task done", "start"),
                    ("task started", "boom"), ("task failed", "boom")]
    lines = task_lines(err)
    for line in lines:
        assert line["execution_id"] == execution_id
        assert line["task"] == f"{line['step']}_task" and line["kind"] == "python"
        assert line["attempt"] == 1
    assert all(isinstance(line["duration_ms"], float) for line in lines[1::2])
    failed = lines[3]
    assert failed["level"] == "INFO" and "disk quota exceeded" in failed["message"]
