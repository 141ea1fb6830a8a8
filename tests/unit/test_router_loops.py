"""Loop steps: iterations scheduled up to max_in_flight, results kept in iteration order."""

from __future__ import annotations

from typing import Any

import pytest
from unit_helpers import parse

from noetl_stream.dsl import Playbook
from noetl_stream.jsonutil import to_plain
from noetl_stream.testing import Reply, RouterHarness
from noetl_stream.testing.router_harness import Command


def loop_playbook(mode: str, max_in_flight: int | None = None, items: Any = "[1, 2, 3, 4, 5]") -> Playbook:
    limit = f", max_in_flight: {max_in_flight}" if max_in_flight else ""
    return parse(f"""
        workload:
          items: {items}
        workflow:
          - step: start
            next: each
          - step: each
            loop:
              in: "{{{{ workload.items }}}}"
              iterator: item
              spec: {{mode: {mode}{limit}}}
            tool: {{kind: noop}}
            next:
              - step: after
                args: {{total: "{{{{ result | sum }}}}"}}
          - step: after
    """)


def times_ten(command: Command) -> Reply:
    item = command["context"]["iter"].get("item")
    return Reply(result=item * 10 if isinstance(item, int) else None)


def iterations(commands: list[Command]) -> list[int]:
    return [int(c["iteration"]) for c in commands]


def test_router_sequential_loop_schedules_one_iteration_at_a_time() -> None:
    harness = RouterHarness(loop_playbook("sequential"))
    harness.answer(harness.pending[0])
    seen: list[int] = []
    while harness.pending_for("each"):
        (command,) = harness.pending_for("each")
        seen.append(command["iteration"])
        # `_total`: the number of iterations, as NoETL's server binds it beside `_index`.
        assert command["context"]["iter"] == {"item": command["iteration"] + 1,
                                              "_index": command["iteration"], "_total": 5}
        harness.answer(command, times_ten(command))
    assert seen == [0, 1, 2, 3, 4]
    assert harness.state.steps["each"].result == [10, 20, 30, 40, 50]


def test_router_parallel_loop_never_exceeds_max_in_flight() -> None:
    harness = RouterHarness(loop_playbook("parallel", max_in_flight=2))
    harness.answer(harness.pending[0])
    peak = 0
    while harness.pending_for("each"):
        in_flight = harness.pending_for("each")
        peak = max(peak, len(in_flight))
        assert len(in_flight) <= 2
        harness.answer(in_flight[-1], times_ten(in_flight[-1]))  # newest first: out of order
    assert peak == 2
    assert iterations(harness.commands_for("each")) == [0, 1, 2, 3, 4]


def test_router_parallel_loop_keeps_results_in_iteration_order_when_answered_out_of_order() -> None:
    harness = RouterHarness(loop_playbook("parallel", max_in_flight=5))
    harness.answer(harness.pending[0])
    for command in reversed(harness.pending_for("each")):
        harness.answer(command, times_ten(command))
    assert harness.state.steps["each"].result == [10, 20, 30, 40, 50]
    (after,) = harness.commands_for("after")
    assert after["context"]["args"] == {"total": 150}
    loop_done = harness.events_of("loop.done")
    assert len(loop_done) == 1 and loop_done[0]["step"] == "each"


def test_router_parallel_loop_defaults_to_ten_in_flight() -> None:
    harness = RouterHarness(loop_playbook("parallel", items=list(range(25))))
    harness.answer(harness.pending[0])
    assert len(harness.pending_for("each")) == 10


def test_router_loop_progress_events_count_done_iterations() -> None:
    harness = RouterHarness(loop_playbook("parallel", max_in_flight=3, items="[1, 2, 3]"))
    harness.run(times_ten)
    assert [(e["done"], e["total"]) for e in harness.events_of("loop.progress")] == [(1, 3), (2, 3), (3, 3)]
    assert harness.events_of("loop.started")[0]["total"] == 3


def test_router_empty_loop_finishes_with_an_empty_result() -> None:
    harness = RouterHarness(loop_playbook("sequential", items="[]"))
    harness.run()
    assert harness.commands_for("each") == []
    assert harness.state.steps["each"].result == []
    assert harness.fired_steps() == ["start", "each", "after"]


def test_router_loop_over_a_mapping_iterates_its_items() -> None:
    harness = RouterHarness(loop_playbook("sequential", items="{a: 1, b: 2}"))
    harness.run()
    items = [to_plain(c["context"]["iter"]["item"]) for c in harness.commands_for("each")]
    assert items == [["a", 1], ["b", 2]]


def test_router_loop_over_a_non_list_fails_the_step() -> None:
    harness = RouterHarness(loop_playbook("sequential", items="true"))
    harness.run()
    assert harness.state.status == "failed"
    assert harness.state.error is not None
    assert harness.state.error["step"] == "each"
    assert "loop.in must give a list" in harness.state.error["message"]


@pytest.mark.parametrize("mode", ["sequential", "parallel"])
def test_router_failed_iteration_stops_scheduling_and_fails_the_loop(mode: str) -> None:
    harness = RouterHarness(loop_playbook(mode, max_in_flight=2))
    harness.answer(harness.pending[0])
    first = harness.pending_for("each")[0]
    harness.answer(first, Reply(ok=False, error={"message": "bad item"}))
    harness.run(times_ten)
    assert harness.state.status == "failed"
    assert harness.state.error is not None
    assert harness.state.error["iteration"] == 0
    assert len(harness.commands_for("each")) == (1 if mode == "sequential" else 2)
    assert harness.events_of("loop.failed")[0]["step"] == "each"


def test_router_loop_result_reads_as_results_and_length() -> None:
    harness = RouterHarness(parse("""
        workflow:
          - step: each
            loop: {in: [1, 2], iterator: x}
            next:
              - step: after
                args:
                  results: "{{ each.results }}"
                  count: "{{ each | length }}"
          - step: after
            tool: {kind: python, code: "result = 1"}
    """))
    harness.run(lambda c: Reply(result=c["context"]["iter"].get("x")))
    (after,) = harness.commands_for("after")
    assert after["context"]["args"] == {"results": [1, 2], "count": 2}


def test_router_template_error_names_the_file_and_the_line_of_its_step() -> None:
    harness = RouterHarness(parse("""
        workflow:
          - step: start
            next: each
          - step: each
            loop: {in: "{{ workload.missing.items + 1 }}", iterator: item}
            tool: {kind: noop}
    """))
    harness.run()
    assert harness.state.status == "failed"
    assert harness.state.error is not None
    # The body's first line is line 5 of test.yaml: `- step: each` is line 8.
    assert harness.state.error["message"].startswith(
        'step "each" failed: test.yaml:8: step "each" field "loop.in": template')


def test_router_iteration_binds_total_beside_index_as_noetls_server_does() -> None:
    harness = RouterHarness(loop_playbook("parallel", max_in_flight=5))
    harness.answer(harness.pending[0])
    totals = {c["context"]["iter"]["_total"] for c in harness.pending_for("each")}
    assert totals == {5}
