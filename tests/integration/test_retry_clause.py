"""The `retry:` clause and `poll:` through a real nats-server, server and worker against the
flaky local HTTP endpoint: calls counted, retry.* / poll.* events with stable action ids, and the
clause run alike to its hand-written canonical translation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from local_http import HttpService
from noetl_stream import ids
from noetl_stream.bus.connection import Bus
from noetl_stream.services import run_services, submit_and_watch
from playbook_files import read_playbook

pytestmark = pytest.mark.integration

PLAYBOOKS = Path(__file__).parent / "playbooks"


async def run_playbook(bus: Bus, text: str, payload: dict[str, Any]
                       ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    events: list[dict[str, Any]] = []
    async with run_services(bus, python_children=1):
        final = await submit_and_watch(bus, playbook_text=text, playbook_file="retry.yaml",
                                       payload=payload, on_event=events.append, timeout_s=30)
    return final, events


def retry_events(events: list[dict[str, Any]]) -> list[tuple[str, int, str | None]]:
    return [(e["event_type"], e["attempt"], e.get("status")) for e in events
            if str(e["event_type"]).startswith("retry.")]


async def test_retry_clause_calls_a_flaky_endpoint_until_it_answers(
        bus: Bus, http_service: HttpService) -> None:
    final, events = await run_playbook(bus, (PLAYBOOKS / "retry_clause.yaml").read_text(),
                                       {"api_url": http_service.url, "key": "clause"})

    assert final["status"] == "completed", final.get("error")
    assert http_service.calls["clause"] == 3
    assert final["steps"]["start"]["result"] == {"key": "clause", "calls": 3}
    assert final["ctx"]["calls"] == 3
    assert retry_events(events) == [("retry.started", 2, None), ("retry.processed", 2, "error"),
                                    ("retry.started", 3, None), ("retry.processed", 3, "ok")]
    done = next(e for e in events if e["event_type"] == "step.done" and e["step"] == "start")
    action = ids.action_id(done["step_run_id"], None, "start_task")
    assert {e["action_id"] for e in events if str(e["event_type"]).startswith("retry.")} == {action}
    started = [e for e in events if e["event_type"] == "retry.started"]
    assert [e["delay_s"] for e in started] == [0.05, 0.1]
    assert all(e["status_code"] == 503 for e in events if e["event_type"] == "retry.processed"
               and e["status"] == "error")


async def test_retry_clause_and_its_canonical_translation_run_alike(
        bus: Bus, http_service: HttpService) -> None:
    payload = {"api_url": http_service.url, "key": "same"}
    clause_final, clause_events = await run_playbook(
        bus, (PLAYBOOKS / "retry_clause.yaml").read_text(), payload)
    http_service.calls.clear()
    canonical_final, canonical_events = await run_playbook(
        bus, (PLAYBOOKS / "retry_canonical.yaml").read_text(), payload)

    assert clause_final["status"] == canonical_final["status"] == "completed"
    assert ([e["event_type"] for e in clause_events]
            == [e["event_type"] for e in canonical_events])
    assert retry_events(clause_events) == retry_events(canonical_events)
    assert ({name: s["result"] for name, s in clause_final["steps"].items()}
            == {name: s["result"] for name, s in canonical_final["steps"].items()})
    assert http_service.calls["same"] == 3


POLL = read_playbook("integration", "retry_clause_poll.yaml")


async def test_poll_reruns_a_task_until_its_guard_holds(bus: Bus, http_service: HttpService) -> None:
    final, events = await run_playbook(bus, POLL, {"api_url": http_service.url})

    assert final["status"] == "completed", final.get("error")
    assert final["steps"]["start"]["result"] == {"key": "poll", "calls": 3}
    assert http_service.calls["poll"] == 3
    polls = [(e["event_type"], e.get("poll_attempt")) for e in events
             if str(e["event_type"]).startswith("poll.")]
    assert polls == [("poll.started", None), ("poll.attempt", 1), ("poll.attempt", 2),
                     ("poll.attempt", 3), ("poll.done", None)]
