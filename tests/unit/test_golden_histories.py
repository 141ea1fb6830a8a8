"""Golden histories: event logs recorded from real executions (tests/fixtures/histories, written
by tests/fixtures/capture_histories.py) replayed through the router without NATS. Each must
rebuild the state its server committed, and each applied event must emit the messages it emitted
then; a change to the router or the DSL that routes a recorded history differently fails here,
naming the history and the first event that differs. A deliberate change records them again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from noetl_stream.dsl import parse_playbook
from noetl_stream.dsl.models import Playbook
from noetl_stream.server.replay import Rebuilt, applied_events, rebuild
from noetl_stream.server.shadow import shadow
from noetl_stream.server.state_diff import LEFT_OUT, content, first_difference
from noetl_stream.subjects import load_topology
from noetl_stream.tools.registry import installed_kinds

HISTORIES = Path(__file__).resolve().parents[1] / "fixtures" / "histories"
SHAPES = {"loop_join_retry", "listener_timer", "listener_signal", "subplaybook_parent",
          "subplaybook_child", "restart", "replay"}
TOPOLOGY = load_topology()


def history(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((HISTORIES / f"{name}.json").read_text())
    return loaded


def playbooks(recorded: dict[str, Any]) -> dict[str, Playbook]:
    return {key: parse_playbook(text, key, kinds=installed_kinds()).playbook
            for key, text in recorded["playbooks"].items()}


def replayed(recorded: dict[str, Any], versions: dict[str, Playbook]) -> Rebuilt:
    first = recorded["playbook_key"]
    rebuilt = rebuild(versions[first], recorded["events"], TOPOLOGY, playbook_key=first,
                      parent_iter=recorded["parent_iter"], applied=recorded["applied"],
                      versions=versions)
    assert rebuilt is not None
    return rebuilt


def routing_difference(recorded: dict[str, Any], rebuilt: Rebuilt) -> str | None:
    """The first applied event whose emitted msg ids differ from the recording's."""
    applied = applied_events(recorded["events"], TOPOLOGY)
    now = [[m.msg_id for m in outbox] for outbox in rebuilt.outboxes]
    for index, (was, is_now) in enumerate(zip(recorded["routing"], now, strict=False)):
        if was != is_now:
            cause = "the start" if index == 0 else applied[index - 1]["event_type"]
            return f"event {index} ({cause}): recorded {was}, now {is_now}"
    if len(recorded["routing"]) != len(now):
        return f"{len(recorded['routing'])} applications recorded, {len(now)} now"
    return None


def test_every_recorded_shape_is_present() -> None:
    assert {p.stem for p in HISTORIES.glob("*.json")} == SHAPES


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_a_recorded_history_routes_as_it_did(name: str) -> None:
    recorded = history(name)
    rebuilt = replayed(recorded, playbooks(recorded))
    assert routing_difference(recorded, rebuilt) is None
    # A recording keeps what `content` compared when it was made: what it leaves out now is out.
    committed = {k: v for k, v in recorded["state"].items() if k not in LEFT_OUT}
    difference = first_difference(committed, newer_defaults_left_out(recorded, rebuilt))
    assert difference is None, f"{name}: {difference.describe()}"


def newer_defaults_left_out(recorded: dict[str, Any], rebuilt: Rebuilt) -> dict[str, Any]:
    """The rebuilt state without the fields added since the recording that still hold their empty
    default: a state field is added with a default (formats.py), which an older record lacks."""
    now = content(rebuilt.state)
    return {k: v for k, v in now.items() if k in recorded["state"] or v not in ({}, [], None, False)}


def test_a_routing_change_fails_a_history() -> None:
    """The check is sensitive: the loop's width changed routes the recorded loop differently."""
    recorded = history("loop_join_retry")
    key = recorded["playbook_key"]
    text = recorded["playbooks"][key]
    assert "max_in_flight: 2" in text
    changed = {key: parse_playbook(text.replace("max_in_flight: 2", "max_in_flight: 3"), key,
                                   kinds=installed_kinds()).playbook}
    difference = routing_difference(recorded, replayed(recorded, changed))
    assert difference is not None and difference.startswith("event ")


def test_shadow_replay_of_a_recorded_history_against_itself_reports_nothing() -> None:
    for name in sorted(SHAPES):
        recorded = history(name)
        versions = playbooks(recorded)
        first = versions[recorded["playbook_key"]]
        if len(versions) > 1:
            continue  # a history that changed version mid-way is compared version by version
        report = shadow(first, first, recorded["events"], TOPOLOGY,
                        execution_id=recorded["execution_id"],
                        playbook_key=recorded["playbook_key"], parent_iter=recorded["parent_iter"])
        assert report.differences == [], name


def test_shadow_replay_names_the_arc_a_changed_guard_takes() -> None:
    recorded = history("listener_signal")
    key = recorded["playbook_key"]
    text = recorded["playbooks"][key]
    guard = "event.name == 'signal.approve'"
    assert guard in text
    candidate = parse_playbook(text.replace(guard, "event.name == 'signal.approved'"), key,
                               kinds=installed_kinds()).playbook
    original = playbooks(recorded)[key]
    report = shadow(original, candidate, recorded["events"], TOPOLOGY,
                    execution_id=recorded["execution_id"], playbook_key=key,
                    parent_iter=recorded["parent_iter"])
    assert report.differences[0].startswith("routes differently after signal.approve ")
    assert 'no longer reached: "ship"' in report.differences
