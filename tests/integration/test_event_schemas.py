"""Every event a real execution publishes parses with its JSON Schema in schemas/events/, as a
reader with only the nats CLI and the schema files would parse it; ids and times are well formed.
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from local_http import HttpService
from noetl_stream import jsonutil
from noetl_stream.bus.connection import Bus
from noetl_stream.messages import ExecutionRequest, split_outcome_pool
from noetl_stream.server.cancel import request_cancel
from noetl_stream.server.execution_ids import new_execution_id
from noetl_stream.services import run_services, submit_and_watch
from noetl_stream.testing.events import stored_messages
from noetl_stream.testing.waiting import assert_eventually
from playbook_files import read_playbook

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "schemas" / "events"
PLAYBOOKS = Path(__file__).parent / "playbooks"
FAILING = read_playbook("integration", "event_schemas_failing.yaml")


def validator_for(event_type: str) -> Draft202012Validator:
    path = SCHEMAS / f"{event_type}.schema.json"
    assert path.exists(), f"event type {event_type!r} has no schema at {path}"
    return Draft202012Validator(json.loads(path.read_text()))


async def raw_events(bus: Bus, execution_id: str) -> list[tuple[str, dict[str, Any]]]:
    """(event type, body) of every message the stream holds for the execution, as published."""
    out = []
    for subject, data in await stored_messages(bus.js, f"noetl.events.{execution_id}.>"):
        event_type = split_outcome_pool(subject.split(".", 3)[3])[0]
        if event_type.startswith("signal."):
            continue  # a client's data, not an envelope
        if event_type.startswith("timer.schedule."):
            event_type = "timer.fired"  # the schedule's body is the timer.fired still to come
        out.append((event_type, jsonutil.loads(data)))
    return out


def check(event_type: str, body: dict[str, Any]) -> None:
    errors = [f"{'/'.join(map(str, e.path))}: {e.message}"
              for e in validator_for(event_type).iter_errors(body)]
    assert not errors, f"{event_type} does not match its schema: {errors}\n{body}"
    assert "None" not in body["event_id"], body["event_id"]
    parsed = datetime.strptime(body["time"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    assert abs(parsed.timestamp() - body["timestamp"]) < 1e-3


async def test_published_events_match_their_schemas(bus: Bus, http_service: HttpService) -> None:
    ids: list[str] = []
    async with run_services(bus, python_children=2):
        for name, payload in (("observed.yaml", {}), ("observed.yaml", {"fail": True}),
                              ("retry_clause.yaml", {"api_url": http_service.url, "key": "s"})):
            final = await submit_and_watch(bus, playbook_text=(PLAYBOOKS / name).read_text(),
                                           playbook_file=name, payload=payload,
                                           on_event=lambda e: None, timeout_s=30)
            ids.append(final["execution_id"])
        final = await submit_and_watch(bus, playbook_text=FAILING, playbook_file="failing.yaml",
                                       payload={}, on_event=lambda e: None, timeout_s=30)
        ids.append(final["execution_id"])
        # A listener that waits, then is cancelled: timers, cancellation events.
        approval = (ROOT / "playbooks" / "examples" / "approval.yaml").read_text()
        waiting = new_execution_id()
        seen: list[str] = []
        watch = asyncio.create_task(submit_and_watch(
            bus, playbook_text=approval, playbook_file="approval.yaml", payload={},
            execution_id=waiting, on_event=lambda e: seen.append(e["event_type"]), timeout_s=30))
        def scheduled() -> None:
            assert "timer.scheduled" in seen

        await assert_eventually(scheduled)
        await request_cancel(bus, waiting, reason="schema test", requested_by="test")
        assert (await watch)["status"] == "cancelled"
        ids.append(waiting)
        rejected = new_execution_id()
        request = ExecutionRequest(execution_id=rejected, playbook="not: [a playbook")
        await bus.js.publish(bus.topology.execute_request_subject(),
                             request.model_dump_json().encode())
        async def refused() -> None:
            assert await raw_events(bus, rejected)

        await assert_eventually(refused, timeout_s=10)
        ids.append(rejected)

    seen_types: set[str] = set()
    for execution_id in ids:
        events = await raw_events(bus, execution_id)
        assert events
        for event_type, body in events:
            check(event_type, body)
            seen_types.add(event_type)
        event_ids = [body["event_id"] for _, body in events]
        assert len(event_ids) == len(set(event_ids)), "event ids repeat within an execution"
    # The run covered the kinds of producers: router, server, worker, timers, actions.
    assert {"execution.started", "execution.completed", "execution.failed", "execution.cancelled",
            "execution.rejected", "execution.cancel.requested", "step.started", "step.done",
            "step.failed", "step.skipped", "step.cancelled", "task.started", "loop.started",
            "loop.iteration.done", "loop.iteration.failed", "loop.progress", "loop.failed",
            "loop.done", "retry.started", "retry.processed", "timer.fired"} <= seen_types


async def test_outcome_events_carry_what_python_tasks_printed(bus: Bus) -> None:
    async with run_services(bus, python_children=1):
        final = await submit_and_watch(bus, playbook_text=(PLAYBOOKS / "observed.yaml").read_text(),
                                       playbook_file="observed.yaml", payload={},
                                       on_event=lambda e: None, timeout_s=30)
    events = await raw_events(bus, final["execution_id"])
    start = next(b for t, b in events if t == "step.done" and b["step"] == "start")
    assert start["output"]["say"] == {"stdout": "starting 3 numbers\n", "stderr": "a warning\n",
                                      "stdout_bytes": 19, "stderr_bytes": 10, "truncated": False,
                                      "attempt": 1}
    assert start["output"]["shout"]["stdout"] == "second task\n"
    assert start["result"] == {"ok": True}  # printing changes no result
    squares = sorted((b["iteration"], b["output"]["square_task"]["stdout"]) for t, b in events
                     if t == "loop.iteration.done")
    assert squares == [(0, "squaring 1\n"), (1, "squaring 2\n"), (2, "squaring 3\n")]
    assert final["steps"]["square"]["result"] == [1, 4, 9]
    noop_done = [b for t, b in events if t == "step.done" and b["step"] == "never"]
    assert noop_done == []
