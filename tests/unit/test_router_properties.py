"""Hypothesis invariants of the pure router: determinism, joins fire at most once, apply never raises."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from unit_helpers import parse

from noetl_stream.dsl import Playbook
from noetl_stream.jsonutil import to_plain
from noetl_stream.messages import Malformed
from noetl_stream.router import ExecutionState, apply, start
from noetl_stream.router_events import router_event
from noetl_stream.testing import Reply, RouterHarness, outcome_event

PROPERTY_SETTINGS = settings(max_examples=60, deadline=None, database=None,
                             suppress_health_check=[HealthCheck.too_slow])

# Exclusive and inclusive fan-out, a failure arc, a join, a loop and a bounded back-edge.
NET = parse("""
    workload: {items: [1, 2, 3]}
    workflow:
      - step: start
        next:
          spec: {mode: inclusive}
          arcs:
            - step: a
              when: "{{ result.a }}"
            - step: b
              when: "{{ result.b }}"
            - step: c
              when: "{{ result.c }}"
      - step: a
        next:
          - step: join
          - step: rescue
            when: "{{ event.name == 'step.failed' }}"
      - step: b
        loop:
          in: "{{ workload.items }}"
          iterator: item
          spec: {mode: parallel, max_in_flight: 2}
        next: join
      - step: c
        next:
          spec: {mode: exclusive}
          arcs:
            - step: c
              when: "{{ result.again and args.round | default(0) < 2 }}"
              args: {round: "{{ (args.round | default(0)) + 1 }}"}
            - step: join
      - step: rescue
        next: join
      - step: join
        next:
          - step: tail
            set: {ctx.joined: "{{ (ctx.joined | default(0)) + 1 }}"}
      - step: tail
""")
JOINS = ("join",)

replies = st.builds(
    Reply,
    ok=st.booleans(),
    result=st.fixed_dictionaries({"a": st.booleans(), "b": st.booleans(), "c": st.booleans(),
                                  "again": st.booleans()}),
    error=st.none() | st.just({"message": "boom"}),
)


def drive(playbook: Playbook, data: st.DataObject) -> RouterHarness:
    """Answer pending commands in an order and with replies hypothesis chooses."""
    harness = RouterHarness(playbook)
    while harness.pending and harness.state.status == "running" and len(harness.applied) < 200:
        command = data.draw(st.sampled_from(harness.pending))
        harness.answer(command, data.draw(replies))
    return harness


def replay(playbook: Playbook, events: list[dict[str, Any]],
           *, through_json: bool) -> tuple[list[Any], dict[str, Any]]:
    state = start(playbook, execution_id="exec1", playbook_key=playbook.name,
                  workload=dict(playbook.workload), now=0.0)
    outboxes = [to_plain(state.to_dict()["outbox"])]
    for now, event in enumerate(events, start=1):
        if through_json:
            state = ExecutionState.from_dict(to_plain(state.to_dict()))
        state = apply(playbook, state, router_event(event), float(now)).state
        outboxes.append(to_plain(state.to_dict()["outbox"]))
    return outboxes, to_plain(state.to_dict())


@PROPERTY_SETTINGS
@given(st.data())
def test_router_replaying_the_same_events_gives_the_same_outboxes_and_state(data: st.DataObject) -> None:
    harness = drive(NET, data)
    first = replay(NET, harness.applied, through_json=False)
    second = replay(NET, harness.applied, through_json=False)
    assert first == second
    assert first[1] == to_plain(harness.state.to_dict())


@PROPERTY_SETTINGS
@given(st.data())
def test_router_decisions_do_not_change_when_state_is_snapshotted_between_events(
        data: st.DataObject) -> None:
    harness = drive(NET, data)
    assert replay(NET, harness.applied, through_json=True) == replay(NET, harness.applied,
                                                                     through_json=False)


@PROPERTY_SETTINGS
@given(st.data())
def test_router_join_fires_at_most_once_per_pass(data: st.DataObject) -> None:
    harness = drive(NET, data)
    for join in JOINS:
        assert harness.fired_steps().count(join) <= 1
    assert harness.state.ctx.get("joined", 0) <= 1
    if harness.state.status == "completed":
        # Every command the router asked for was answered, and the run ended cleanly.
        assert harness.pending == []


@PROPERTY_SETTINGS
@given(st.data())
def test_router_every_execution_ends_when_every_command_is_answered(data: st.DataObject) -> None:
    harness = drive(NET, data)
    assert harness.state.status in ("completed", "failed")
    assert harness.event_types()[-1] == f"execution.{harness.state.status}"
    assert harness.state.runs == {} and harness.state.joins == {}


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False)
    | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=6,
)


def garbage_event(harness: RouterHarness) -> st.SearchStrategy[dict[str, Any]]:
    run_ids = [str(c["step_run_id"]) for c in harness.commands]
    return st.fixed_dictionaries(
        {
            "event_type": st.sampled_from(["step.done", "step.failed", "loop.iteration.done",
                                           "loop.iteration.failed", "loop.done", "signal.x",
                                           ""]) | json_values,
            "step_run_id": (st.sampled_from(run_ids) if run_ids else st.nothing()) | json_values,
        },
        optional={
            "execution_id": json_values,
            "step": st.sampled_from([s.name for s in NET.steps]) | json_values,
            "iteration": st.none() | st.integers(-2, 4) | st.sampled_from([True, False, 1.0, "0", [0]])
            | json_values,
            "result": json_values,
            "error": json_values,
            "ctx_patch": json_values,
            "http": json_values,
            "pool": st.just("default") | json_values,
        },
    )


@pytest.mark.slow
@settings(PROPERTY_SETTINGS, max_examples=40)
@given(st.data())
def test_router_apply_never_raises_for_garbage_events(data: st.DataObject) -> None:
    harness = RouterHarness(NET)
    for _ in range(data.draw(st.integers(1, 15))):
        if harness.pending and data.draw(st.booleans()):
            command = data.draw(st.sampled_from(harness.pending))
            event = outcome_event(command, data.draw(replies))
            if data.draw(st.booleans()):
                event = {**event, **data.draw(garbage_event(harness))}
        else:
            event = data.draw(garbage_event(harness))
        with contextlib.suppress(Malformed):  # refused before the router, as the server does
            harness.send(event)
        assert harness.state.status in ("running", "completed", "failed")
        ExecutionState.from_dict(to_plain(harness.state.to_dict()))
