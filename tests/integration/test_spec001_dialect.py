"""The spec 001 step form through the real server and worker, and the same run as its
hand-written canonical translation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from noetl_stream.bus.connection import Bus
from noetl_stream.services import run_services, submit_and_watch
from playbook_files import read_playbook

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]
EXAMPLE = ROOT / "playbooks" / "examples" / "spec001_order_routing.yaml"
CANONICAL = Path(__file__).parent / "playbooks" / "spec001_order_routing_canonical.yaml"
AUDIT = {"case.evaluated", "next.evaluated", "case.branch.suppressed"}


async def run_playbook(bus: Bus, path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    events: list[dict[str, Any]] = []
    async with run_services(bus, python_children=1):
        final = await submit_and_watch(bus, playbook_text=path.read_text(), playbook_file=str(path),
                                       payload={}, on_event=events.append, timeout_s=30)
    return final, events


async def test_spec001_inclusive_case_runs_branches_in_priority_order_and_routes(bus: Bus) -> None:
    final, events = await run_playbook(bus, EXAMPLE)

    assert final["status"] == "completed", final.get("error")
    steps = final["steps"]
    assert steps["process_order"]["result"] == {"sent_to": "customer-7"}  # the last task run
    assert steps["review"]["result"] == {"reviewed": 7}
    assert steps["finalize"]["runs"] == 1
    (evaluated,) = [e for e in events if e["event_type"] == "case.evaluated"]
    assert (evaluated["matched"], evaluated["case_mode"]) == (["case_1", "case_0"], "inclusive")
    (chosen,) = [e for e in events if e["event_type"] == "next.evaluated"]
    assert (chosen["winner_branch"], chosen["policy"], chosen["selected"]) == (
        "case_1", "break_chain", [{"step": "review", "with": {"order_id": 7}}])


async def test_spec001_playbook_and_its_canonical_translation_run_alike(bus: Bus) -> None:
    spec_final, spec_events = await run_playbook(bus, EXAMPLE)
    canonical_final, canonical_events = await run_playbook(bus, CANONICAL)

    assert spec_final["status"] == canonical_final["status"] == "completed"
    spec_types = [str(e["event_type"]) for e in spec_events]
    assert AUDIT & set(spec_types)
    assert ([t for t in spec_types if t not in AUDIT]
            == [str(e["event_type"]) for e in canonical_events])
    assert ({name: s["result"] for name, s in spec_final["steps"].items()}
            == {name: s["result"] for name, s in canonical_final["steps"].items()})


DELAYED = read_playbook("integration", "spec001_dialect_delayed.yaml")


async def test_a_delayed_next_starts_its_step_when_the_durable_timer_fires(bus: Bus) -> None:
    events: list[dict[str, Any]] = []
    async with run_services(bus, python_children=1):
        final = await submit_and_watch(bus, playbook_text=DELAYED, playbook_file="delayed.yaml",
                                       payload={}, on_event=events.append, timeout_s=30)

    assert final["status"] == "completed", final.get("error")
    assert final["steps"]["later"]["result"] == {"n": 7}
    # The watcher sees the schedule message as scheduled, then the `timer.fired` it became.
    (scheduled,) = [e for e in events if e["event_type"] == "timer.scheduled"]
    (fired,) = [e for e in events if e["event_type"] == "timer.fired"]
    (started,) = [e for e in events if e["event_type"] == "step.started" and e["step"] == "later"]
    assert events.index(scheduled) < events.index(fired) < events.index(started)
    assert scheduled["fire_at"] == fired["fire_at"]
    assert fired["fire_at"] - fired["set_at"] == 1.0
    assert started["timestamp"] >= fired["fire_at"]
