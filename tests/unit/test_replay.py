"""Rebuilding a state from its recorded log without NATS (server/replay.py, server/state_diff.py):
the log a router-driven execution leaves (its applied events and the events it emitted, each at
its own `now`) rebuilds the same state, times included, also across a restart; a changed field
is named."""

from __future__ import annotations

from typing import Any

import pytest
from unit_helpers import parse

from noetl_stream.router.state import ExecutionState, Outgoing
from noetl_stream.server.replay import copy_state, rebuild
from noetl_stream.server.state_diff import content, first_difference, outbox_difference
from noetl_stream.subjects import load_topology
from noetl_stream.testing.router_harness import Command, Reply, RouterHarness

PLAYBOOK = parse("""
    workload: {items: [1, 2, 3], ok: false}
    workflow:
      - step: start
        tool: {kind: noop}
        next: [{step: squares}, {step: check}]
      - step: squares
        loop:
          in: "{{ workload.items }}"
          iterator: item
          spec: {mode: parallel, max_in_flight: 2}
        tool: {kind: noop}
        next: both
      - step: check
        tool: {kind: python, input: {ok: "{{ workload.ok }}"}, code: "result = ok"}
        next: both
      - step: both
        tool: {kind: noop}
""")

TOPOLOGY = load_topology()


class Recorder(RouterHarness):
    """A harness that keeps the log the events stream would hold."""

    def __init__(self) -> None:
        self.log: list[dict[str, Any]] = []
        super().__init__(PLAYBOOK, now=1000.0)

    def _collect(self, outbox: list[Outgoing]) -> None:
        super()._collect(outbox)
        for m in outbox:
            if m.kind == "event":
                self.log.append({**m.body, "event_id": m.msg_id})

    def send(self, event: dict[str, Any]) -> list[Outgoing]:
        self.log.append({**event, "timestamp": self.now + 0.5})  # a worker's own clock
        return super().send(event)


def check(command: Command) -> Reply:
    if command["step"] == "check" and not command["context"]["workload"]["ok"]:
        return Reply(ok=False, error={"message": "not yet"})
    return Reply(result=command.get("iteration", command["step"]))


def rebuilt(h: Recorder) -> ExecutionState:
    out = rebuild(PLAYBOOK, h.log, TOPOLOGY, playbook_key=h.state.playbook_key)
    assert out is not None
    assert outbox_difference(h.state.outbox, out.outboxes) is None
    return out.state


def test_a_recorded_log_rebuilds_the_same_state_with_the_times_it_was_applied_at() -> None:
    h = Recorder()
    h.run(check)
    assert h.state.status == "failed"

    state = rebuilt(h)

    assert first_difference(content(h.state), content(state)) is None
    assert state.started_at == 1000.0 and state.ended_at == h.state.ended_at
    assert state.ended_at is not None and state.ended_at > 1000.0


def test_a_restart_in_the_log_rebuilds_too() -> None:
    h = Recorder()
    h.run(check)
    h.send({"event_type": "execution.restart.requested", "execution_id": "exec1",
            "workload": {"ok": True}, "restart": 1})
    h.run(check)
    assert h.state.status == "completed"

    state = rebuilt(h)

    assert first_difference(content(h.state), content(state)) is None
    assert state.restarts == 1


def test_a_changed_field_is_named_with_both_values() -> None:
    h = Recorder()
    h.run(check)
    state = rebuilt(h)
    state.record("check").runs = 5

    difference = first_difference(content(h.state), content(state))

    assert difference is not None
    assert difference.describe() == "steps.check.runs: committed 1, rebuilt from events 5"
    assert first_difference({"a": {"b": 1}}, {"a": {}}) is not None


def test_events_stored_after_the_state_was_read_are_left_out_of_its_rebuild() -> None:
    h = Recorder()
    h.answer(h.pending[0], Reply(result="start"))  # start done: squares and check in flight
    committed = copy_state(h.state)
    h.answer(h.pending[0], Reply(result=1))  # stored in the log, not in `committed`

    out = rebuild(PLAYBOOK, h.log, TOPOLOGY, playbook_key=committed.playbook_key,
                  applied=committed.applied)
    everything = rebuild(PLAYBOOK, h.log, TOPOLOGY, playbook_key=committed.playbook_key)

    assert out is not None and everything is not None
    assert first_difference(content(committed), content(out.state)) is None
    assert first_difference(content(committed), content(everything.state)) is not None


def test_a_start_without_a_timestamp_is_named_rather_than_rebuilt_at_some_time() -> None:
    recorder = Recorder()
    recorder.run(check)
    started = next(e for e in recorder.log if e.get("event_type") == "execution.started")
    del started["timestamp"]
    with pytest.raises(ValueError, match=r"execution\.started of .* carries no timestamp"):
        rebuild(PLAYBOOK, recorder.log, TOPOLOGY, playbook_key=recorder.state.playbook_key)

def test_an_event_in_the_log_the_server_refused_is_not_applied_in_the_rebuild() -> None:
    h = Recorder()
    h.run(check)
    # A child.started without the child's id: the server refuses it as `schema` and never
    # applies it, so the state it committed does not count it either.
    refused = {"event_type": "child.started", "execution_id": "exec1", "timestamp": 1001.0,
               "step_run_id": "exec1.start.1", "detached": False}
    log = [*h.log[:3], refused, *h.log[3:]]

    out = rebuild(PLAYBOOK, log, TOPOLOGY, playbook_key=h.state.playbook_key)

    assert out is not None
    assert first_difference(content(h.state), content(out.state)) is None
    assert out.state.applied == h.state.applied
