"""`iter.parent` (spec 002 §6.4): a child execution started from a loop iteration sees that
iteration as `iter.parent`, in the router's own templates and in every command it sends."""

from __future__ import annotations

import pytest
from unit_helpers import parse

from noetl_stream.dsl.context import build_context
from noetl_stream.errors import PlaybookError
from noetl_stream.router.state import ExecutionState
from noetl_stream.testing import Reply, RouterHarness
from noetl_stream.testing.router_harness import Command

CHILD = """
    workflow:
      - step: start
        tool:
          kind: python
          code: "result = city"
          input: {city: "{{ iter.parent.city.name }}"}
        next: hotels
      - step: hotels
        loop:
          in: "{{ iter.parent.city.hotels }}"
          iterator: hotel
        tool:
          kind: python
          code: "result = f'{city}/{hotel}'"
          input:
            city: "{{ iter.parent.city.name }}"
            hotel: "{{ iter.hotel }}"
"""

PARENT_ITER = {"city": {"name": "Oslo", "hotels": ["a", "b"]}, "_index": 1}


def echo_iter(command: Command) -> Reply:
    return Reply(result=command["context"]["iter"])


def test_child_loop_reads_its_collection_and_items_under_the_parent_iteration() -> None:
    harness = RouterHarness(parse(CHILD), parent_iter=PARENT_ITER)
    state = harness.run(echo_iter)
    assert state.status == "completed"
    (start,) = harness.commands_for("start")
    assert start["context"]["iter"] == {"parent": PARENT_ITER}
    hotels = harness.commands_for("hotels")
    assert [c["context"]["iter"] for c in hotels] == [
        {"parent": PARENT_ITER, "hotel": "a", "_index": 0, "_total": 2},
        {"parent": PARENT_ITER, "hotel": "b", "_index": 1, "_total": 2},
    ]


def test_without_a_parent_iteration_iter_has_no_parent() -> None:
    pb = parse("""
        workflow:
          - step: start
            loop: {in: [1], iterator: n}
            tool: {kind: noop}
    """)
    harness = RouterHarness(pb)
    harness.run(echo_iter)
    assert harness.commands_for("start")[0]["context"]["iter"] == {"n": 1, "_index": 0, "_total": 1}


def test_parent_iteration_survives_the_state_round_trip() -> None:
    harness = RouterHarness(parse(CHILD), parent_iter=PARENT_ITER)
    again = ExecutionState.from_dict(harness.state.to_dict())
    assert again.parent_iter == PARENT_ITER


def test_parent_is_not_a_bare_name_so_a_workload_key_of_that_name_still_resolves() -> None:
    pb = parse("""
        workload: {parent: from-workload}
        workflow:
          - step: start
            tool:
              kind: python
              code: "result = p"
              input: {p: "{{ parent }}"}
    """)
    harness = RouterHarness(pb, parent_iter=PARENT_ITER)
    (command,) = harness.pending
    context = build_context(workload=command["context"]["workload"], ctx={},
                            iter_vars=command["context"]["iter"])
    assert context["parent"] == "from-workload"
    assert context["iter"]["parent"] == PARENT_ITER


def test_a_loop_iterator_named_parent_is_rejected() -> None:
    with pytest.raises(PlaybookError) as info:
        parse("workflow:\n  - step: start\n    loop: {in: [1], iterator: parent}\n")
    assert [str(i) for i in info.value.issues] == [
        'test.yaml:7: step "start" field "loop.iterator": iterator "parent" is reserved: '
        "`iter.parent` is the outer iteration (spec 002 §6.4); choose another name"]
