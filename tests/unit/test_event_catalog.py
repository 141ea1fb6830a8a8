"""The event catalog (noetl_stream/events.py) is what the README lists and what the code emits."""

from __future__ import annotations

import re
from pathlib import Path

from noetl_stream import ids
from noetl_stream.bus.publish import stamp
from noetl_stream.events import EVENT_TYPES, event_types_table
from noetl_stream.isotime import iso_time

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "noetl_stream"


def test_readme_lists_exactly_the_catalog() -> None:
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"<!-- event-types:[^>]*-->\n(.*?)\n<!-- /event-types -->", readme, re.S)
    assert block is not None, "README.md lost its generated event-type table"
    assert block.group(1) == event_types_table(), (
        "README.md's event types differ from noetl_stream/events.py; paste event_types_table()")


def test_every_event_type_the_code_names_is_in_the_catalog() -> None:
    named: set[str] = set()
    for path in SRC.rglob("*.py"):
        text = path.read_text()
        named |= set(re.findall(r'emit\(\s*"([a-z_]+(?:\.[a-z_]+)+)"', text))
        named |= set(re.findall(r'"event_type": "([a-z_]+(?:\.[a-z_]+)+)"', text))
        named |= set(re.findall(r'publish\(\s*"([a-z_]+(?:\.[a-z_]+)+)"', text))
    named.discard("credential.read")  # the audit stream's records, not execution events
    assert named, "the scan found nothing; its patterns no longer match the code"
    assert named <= set(EVENT_TYPES), sorted(named - set(EVENT_TYPES))


def test_stamp_adds_id_and_iso_time_and_keeps_what_is_there() -> None:
    body = stamp({"event_type": "x", "timestamp": 0.5}, "evt:1:x")
    assert body == {"event_type": "x", "timestamp": 0.5, "event_id": "evt:1:x",
                    "time": "1970-01-01T00:00:00.500000Z"}
    kept = stamp({"event_id": "mine", "timestamp": 1.0, "time": "given"}, "other")
    assert (kept["event_id"], kept["time"]) == ("mine", "given")
    assert iso_time(1_767_225_600.25) == "2026-01-01T00:00:00.250000Z"


def test_message_ids_never_spell_none() -> None:
    assert ids.event_msg_id("7", "task.started", "7.s.1", None) == "evt:7:task.started:7.s.1:-"
    assert ids.event_msg_id("7", "step.done", "7.s.1", 0) == "evt:7:step.done:7.s.1:0"
