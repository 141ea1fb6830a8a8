"""Static checks of the net (dsl/net_checks.py): a step nothing reaches, a join waiting for
one, a read of a step that cannot have run yet; warnings, errors under --strict, each with its
file and line. Nets that are fine (branches, cycles, guarded reads) are never reported.
"""

from __future__ import annotations

import pytest
from unit_helpers import FILE, playbook_text

from noetl_stream.dsl import parse_playbook
from noetl_stream.errors import PlaybookError
from noetl_stream.testing.router_harness import Reply, RouterHarness

UNREACHABLE = """
    workflow:
      - step: start
        tool: {kind: noop}
        next: end
      - step: leftover
        tool: {kind: noop}
      - step: end
"""


def warnings_of(body: str) -> list[str]:
    return [str(w) for w in parse_playbook(playbook_text(body), FILE).warnings]


def errors_of(body: str) -> list[str]:
    with pytest.raises(PlaybookError) as caught:
        parse_playbook(playbook_text(body), FILE, strict=True)
    return [str(i) for i in caught.value.issues if i.severity == "error"]


def test_a_step_no_path_reaches_is_a_warning_and_an_error_under_strict() -> None:
    # `leftover` has no `next:`, so it is routed to `end`: `end` becomes a join that waits for it.
    expected = [
        'test.yaml:9: step "leftover" field "step": no path from the start step "start" reaches '
        "this step: it never runs",
        'test.yaml:11: step "end" field "step": this join also waits for "leftover", which no path '
        "from the start step reaches: it runs only once nothing else in the execution runs, not "
        "when its other inputs arrive",
    ]
    assert warnings_of(UNREACHABLE) == [w.replace('"step": ', '"step": warning: ')
                                        for w in expected]
    assert errors_of(UNREACHABLE) == expected


def test_a_join_waiting_for_a_dead_branch_is_reported_on_the_join() -> None:
    found = errors_of("""
        workflow:
          - step: start
            tool: {kind: noop}
            next: [a]
          - step: a
            tool: {kind: noop}
            next: [merge]
          - step: orphan
            tool: {kind: noop}
            next: [merge]
          - step: merge
            tool: {kind: noop}
    """)
    assert 'test.yaml:15: step "merge" field "step": this join also waits for "orphan"' in found[1]


def test_reading_a_step_that_runs_only_later_is_reported_with_its_field() -> None:
    assert errors_of("""
        workflow:
          - step: start
            tool: {kind: python, input: {rows: "{{ load.rows }}"}, code: "result = rows"}
            next: load
          - step: load
            tool: {kind: noop}
    """) == ['test.yaml:7: step "start" field "tool.input": reads step "load", which cannot have '
             'run before this step: every path from the start step reaches "load" only through '
             '"start"']


def test_reading_a_step_of_a_parallel_branch_is_not_reported() -> None:
    # `right` may finish before `left` runs (inclusive arcs): reading it is a race, not an error.
    assert warnings_of("""
        workflow:
          - step: start
            tool: {kind: noop}
            next:
              spec: {mode: inclusive}
              arcs: [{step: left}, {step: right}]
          - step: left
            tool: {kind: python, input: {r: "{{ right.x }}"}, code: "result = r"}
          - step: right
            tool: {kind: noop}
    """) == []


def test_cycles_guards_and_own_results_are_not_reported() -> None:
    # A page loop reads its own last result and a later step's (which leads back to it); a
    # guarded read says the value is optional.
    assert warnings_of("""
        workflow:
          - step: start
            tool: {kind: noop}
            next: page
          - step: page
            tool:
              kind: python
              input: {after: "{{ check.cursor | default(0) }}", last: "{{ page.n }}"}
              code: "result = {'n': after}"
            next: check
          - step: check
            tool: {kind: python, input: {p: "{{ page.n }}"}, code: "result = {'cursor': p}"}
            next:
              - step: page
                when: "{{ check.cursor < 3 }}"
              - step: done
          - step: done
            tool: {kind: python, input: {again: "{{ check.cursor }}"}, code: "result = again"}
    """) == []


def test_a_name_a_ctx_key_also_answers_is_not_taken_for_the_step() -> None:
    assert warnings_of("""
        workflow:
          - step: start
            tool: {kind: noop}
            set: {ctx.load: 1}
            next:
              - step: use
                args: {n: "{{ load }}"}
          - step: use
            tool: {kind: noop}
            next: load
          - step: load
            tool: {kind: noop}
    """) == []


def test_what_the_join_warning_says_is_what_the_router_does() -> None:
    # `merge` also waits for `orphan`, which nothing reaches: it does not run when `a` is done,
    # only once `slow` (a parallel branch) has ended too and nothing else runs.
    text = playbook_text("""
        workflow:
          - step: start
            tool: {kind: noop}
            next:
              spec: {mode: inclusive}
              arcs: [{step: a}, {step: slow}]
          - step: a
            tool: {kind: noop}
            next: [merge]
          - step: slow
            tool: {kind: noop}
          - step: orphan
            tool: {kind: noop}
            next: [merge]
          - step: merge
            tool: {kind: noop}
    """)
    result = parse_playbook(text, FILE)
    assert any('this join also waits for "orphan"' in str(w) for w in result.warnings)
    harness = RouterHarness(result.playbook)
    harness.run(lambda command: Reply() if command["step"] != "slow" else None)
    assert "merge" not in harness.fired_steps()  # `a` is done, `merge` still waits
    (slow,) = harness.pending_for("slow")
    harness.answer(slow)
    harness.run()
    assert harness.fired_steps()[-1] == "merge"
    assert harness.state.status == "completed"
