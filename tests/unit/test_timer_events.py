"""A durable timer as watchers see it: the schedule message reads as `timer.scheduled` (with its
`fire_at`), the message the stream publishes when it is due as `timer.fired`; the live progress
shows both for timers a playbook names and stays quiet about step watchdogs."""

from __future__ import annotations

import io
import time
from typing import Any

from noetl_stream import jsonutil
from noetl_stream.bus.signals import decode_event_body
from noetl_stream.cli.progress import ProgressPrinter
from noetl_stream.subjects import load_topology

TOPOLOGY = load_topology()
SET_AT = 1_767_225_600.0


def timer_body(timer_id: str = "timeout", after_s: float = 3600.0) -> dict[str, Any]:
    """The body the router asks for: the `timer.fired` event to deliver when it is due."""
    return {"event_type": "timer.fired", "execution_id": "42", "step": "wait_for_approval",
            "step_run_id": "42.wait_for_approval.1", "timer_id": timer_id,
            "fire_at": SET_AT + after_s, "set_at": SET_AT,
            "data": {"timer_id": timer_id, "name": timer_id, "step": "wait_for_approval"}}


def test_the_schedule_message_reads_as_scheduled_with_its_fire_time() -> None:
    subject = TOPOLOGY.timer_schedule_subject("42", "timeout")
    event = decode_event_body(TOPOLOGY, subject, jsonutil.dumps(timer_body()), seq=5)
    assert event["event_type"] == "timer.scheduled"
    assert event["fire_at"] == SET_AT + 3600 and event["timer_id"] == "timeout"
    assert "seq" not in event  # only a fired timer is something a listener takes once


def test_the_message_delivered_when_due_reads_as_fired() -> None:
    subject = TOPOLOGY.event_subject("42", "timer.fired")
    event = decode_event_body(TOPOLOGY, subject, jsonutil.dumps(timer_body()), seq=9)
    assert event["event_type"] == "timer.fired" and event["seq"] == 9


def progress_of(*events: dict[str, Any]) -> str:
    out = io.StringIO()
    printer = ProgressPrinter(out, color=False)
    for event in events:
        printer(event)
    return out.getvalue()


def test_progress_shows_a_scheduled_timer_then_its_firing() -> None:
    scheduled = {**timer_body(), "event_type": "timer.scheduled"}
    shown = progress_of(scheduled, timer_body())
    at = time.strftime("%H:%M:%S", time.localtime(SET_AT + 3600))
    scheduled_line, fired_line = shown.splitlines()
    assert scheduled_line.endswith(f"⏲ wait_for_approval: timer timeout scheduled, fires in 1h "
                                   f"(at {at})")
    assert fired_line.endswith("⏲ wait_for_approval: timer timeout fired")


def test_progress_names_the_target_of_a_delayed_next() -> None:
    body = timer_body("next.1", after_s=90)
    body["data"]["to"] = "later"
    shown = progress_of({**body, "event_type": "timer.scheduled"})
    assert "⏲ wait_for_approval: next later scheduled, fires in 90s" in shown


def test_progress_leaves_watchdog_timers_out() -> None:
    body = timer_body("watchdog.1", after_s=62)
    assert progress_of({**body, "event_type": "timer.scheduled"}, body) == ""
