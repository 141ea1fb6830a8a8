"""The step-level `case` dialect through the real server and worker: pagination with `call`,
`collect`, `result` and `next`, and the same run as its hand-written canonical translation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from local_http import HttpService
from noetl_stream.bus.connection import Bus
from noetl_stream.services import run_services, submit_and_watch

pytestmark = pytest.mark.integration

PLAYBOOKS = Path(__file__).parent / "playbooks"
IDS = list(range(1, 11))  # local_http serves ten items, four per page


async def run_playbook(bus: Bus, name: str, api_url: str) -> tuple[dict[str, Any], list[str]]:
    events: list[dict[str, Any]] = []
    path = PLAYBOOKS / name
    async with run_services(bus, python_children=1):
        final = await submit_and_watch(bus, playbook_text=path.read_text(), playbook_file=str(path),
                                       payload={"api_url": api_url}, on_event=events.append,
                                       timeout_s=30)
    return final, [str(e["event_type"]) for e in events]


async def test_case_pagination_collects_every_page_and_routes_with_args(
        bus: Bus, http_service: HttpService) -> None:
    final, _ = await run_playbook(bus, "case_pagination.yaml", http_service.url)

    assert final["status"] == "completed", final.get("error")
    assert http_service.calls["items"] == 3
    steps = final["steps"]
    assert steps["fetch"]["runs"] == 1
    assert steps["fetch"]["result"] == IDS
    assert steps["report"]["result"] == {"count": 10, "last": 10}
    assert final["ctx"]["ids"] == IDS


async def test_case_playbook_and_its_canonical_translation_run_alike(
        bus: Bus, http_service: HttpService) -> None:
    case_final, case_events = await run_playbook(bus, "case_pagination.yaml", http_service.url)
    canonical_final, canonical_events = await run_playbook(
        bus, "case_pagination_canonical.yaml", http_service.url)

    assert case_final["status"] == canonical_final["status"] == "completed"
    assert case_events == canonical_events
    assert ({name: s["result"] for name, s in case_final["steps"].items()}
            == {name: s["result"] for name, s in canonical_final["steps"].items()})
    assert http_service.calls["items"] == 6
