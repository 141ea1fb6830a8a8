"""The event catalog (noetl_stream/events.py) is complete: every event-type literal the router,
runtime and tools name is in it (test_event_catalog.py checks the README's table)."""

from __future__ import annotations

import re
from pathlib import Path

from noetl_stream.events import EVENT_TYPES

ROOT = Path(__file__).parents[2]
SRC = ROOT / "src" / "noetl_stream"

# A published event's name as a literal: the first argument of emit / publish_event / _event.
PUBLISHED = re.compile(r'(?:\b(?:emit|_event)\(\s*|\bpublish_event\([^"()]*)"([a-z_]+\.[a-z_.]+)"')
FAMILIES = ("execution", "step", "task", "loop", "retry", "poll", "sink", "case", "next",
            "child", "timer", "event")
# Names in those families that are not events on the stream: case-rule and guard names.
NOT_EVENTS = {"step.enter", "step.exit", "call.done", "call.error", "case.when", "case.set",
              "case.result", "case.call", "next.arcs.when", "next.arcs.set", "next.arcs.args",
              "loop.in", "loop.spec.max_in_flight", "loop.cursor.claim", "timer.schedule."}


def literals() -> set[str]:
    found: set[str] = set()
    pattern = re.compile('"((?:' + "|".join(FAMILIES) + r')\.[a-z_.]+)"')
    for folder in ("router", "bus", "server", "worker", "tools"):
        for path in (SRC / folder).rglob("*.py"):
            found |= set(pattern.findall(path.read_text()))
    return found - NOT_EVENTS


def test_every_event_name_in_the_code_is_catalogued() -> None:
    missing = literals() - set(EVENT_TYPES)
    assert not missing, f"add these to noetl_stream/events.py: {sorted(missing)}"


def test_published_literals_are_found_by_the_scan() -> None:
    published: set[str] = set()
    for path in SRC.rglob("*.py"):
        published |= set(PUBLISHED.findall(path.read_text()))
    assert {"step.started", "task.redelivered", "retry.started"} <= published
    assert published <= set(EVENT_TYPES)

