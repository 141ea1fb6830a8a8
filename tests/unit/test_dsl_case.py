"""The step-level `case` dialect compiles to the canonical IR, field by field (spec 000, 004 §8)."""

from __future__ import annotations

import pytest
from unit_helpers import parse, playbook_text

from noetl_stream.dsl import Arc, Rule, parse_playbook
from noetl_stream.dsl.dialects.case import events_named
from noetl_stream.dsl.models import AdmitRule
from noetl_stream.errors import PlaybookError

PAGINATION = """
    workflow:
      - step: start
        next: fetch
      - step: fetch
        tool:
          kind: http
          url: "{{ workload.api_url }}/items"
          params: {page: 1, size: 4}
        case:
          - when: "{{ event.name == 'step.enter' }}"
            then:
              set:
                ctx:
                  pages: []
          - when: "{{ event.name == 'call.error' and error.status in [502, 503] }}"
            then:
              retry: {max_attempts: 4, initial_delay: 0.5, backoff_multiplier: 3}
          - when: "{{ event.name == 'call.done' and response.more }}"
            then:
              collect: {from: response.data, into: pages, mode: extend}
              call:
                params: {page: "{{ response.page + 1 }}"}
          - when: "{{ event.name == 'call.done' }}"
            then:
              collect: {from: response.data, into: pages, mode: extend}
              result: {from: pages}
              next:
                - step: report
                  args: {pages: "{{ pages }}"}
        next: fallback
      - step: report
      - step: fallback
"""

EXTEND = "{{ (ctx['pages'] or []) + (((response.data) or []) | list) }}"


def test_case_step_enter_becomes_a_router_entry_rule() -> None:
    step = parse(PAGINATION).step("fetch")
    assert step.enter == (Rule(when="{{ event.name == 'step.enter' }}", do="continue",
                               event="step.enter", set_ctx={"pages": []}, line=step.enter[0].line),)
    assert step.exit == ()
    assert step.admit == ()


def test_case_call_rules_become_task_policy_rules_in_order() -> None:
    (task,) = parse(PAGINATION).step("fetch").tasks
    assert task.has_policy
    retry, page, last = task.rules
    assert (retry.event, retry.do, retry.attempts, retry.delay, retry.backoff, retry.multiplier) == (
        "call.error", "retry", 4, 0.5, "exponential", 3.0)
    assert retry.when == "{{ event.name == 'call.error' and error.status in [502, 503] }}"
    assert (retry.set_ctx, retry.call, retry.result, retry.route) == ({}, {}, None, None)

    assert (page.event, page.do, page.to) == ("call.done", "jump", "fetch_task")
    assert page.call == {"params": {"page": "{{ response.page + 1 }}"}}
    assert page.set_ctx == {"pages": EXTEND}
    assert (page.result, page.route) == (None, None)

    assert (last.event, last.do, last.to) == ("call.done", "break", None)
    assert last.set_ctx == {"pages": EXTEND}
    assert last.result == "{{ pages }}"
    assert last.route == "case[3]"
    assert last.call == {}


def test_case_next_adds_route_arcs_after_the_structural_next() -> None:
    nxt = parse(PAGINATION).step("fetch").next
    assert nxt.mode == "exclusive"
    structural, routed = nxt.arcs
    assert (structural.step, structural.route) == ("fallback", None)
    assert routed == Arc(step="report", args={"pages": "{{ pages }}"}, route="case[3]",
                         line=routed.line)


def test_case_step_exit_becomes_exit_rules_with_routes() -> None:
    step = parse("""
        workflow:
          - step: start
            case:
              - when: "{{ event.name == 'step.exit' and result.n > 1 }}"
                then:
                  set: {ctx.big: true}
                  result: {from: "result.n"}
                  next: [{step: big, args: {n: "{{ result.n }}"}}, small]
              - when: "{{ event.name == 'step.exit' }}"
                then:
                  fail: true
          - step: big
          - step: small
    """).step("start")
    first, second = step.exit
    assert (first.event, first.do, first.set_ctx, first.result, first.route) == (
        "step.exit", "continue", {"big": True}, "{{ result.n }}", "case[0]")
    assert (second.event, second.do, second.route) == ("step.exit", "fail", None)
    assert [(a.step, a.args, a.route) for a in step.next.arcs] == [
        ("big", {"n": "{{ result.n }}"}, "case[0]"), ("small", {}, "case[0]")]
    assert step.tasks[0].rules == ()


def test_case_skip_on_step_enter_is_an_admission_rule() -> None:
    step = parse("""
        workflow:
          - step: start
            case:
              - when: "{{ event.name == 'step.enter' and workload.off }}"
                then: {skip: true}
    """).step("start")
    assert step.admit == (AdmitRule(when="{{ event.name == 'step.enter' and workload.off }}",
                                    allow=False),)
    assert step.enter == ()


def test_case_collect_modes_compile_to_ctx_and_iter_writes() -> None:
    (task,) = parse("""
        workflow:
          - step: start
            tool: {kind: noop}
            case:
              - when: "{{ event.name == 'call.done' }}"
                then:
                  collect: {from: "{{ result }}", into: iter.seen}
              - when: "{{ event.name == 'call.done' }}"
                then:
                  collect: {from: result.x, into: ctx.last, mode: replace}
    """).step("start").tasks
    append, replace = task.rules
    assert append.set_iter == {"seen": "{{ (iter['seen'] or []) + [result] }}"}
    assert replace.set_ctx == {"last": "{{ result.x }}"}


def test_case_entry_without_event_test_is_placed_at_every_event() -> None:
    step = parse("""
        workflow:
          - step: start
            tool: {kind: noop}
            case:
              - when: "{{ workload.flag }}"
                then: {set: {hit: 1}}
    """).step("start")
    assert [r.event for r in step.enter] == ["step.enter"]
    assert [r.event for r in step.tasks[0].rules] == ["call.error", "call.done"]
    assert [r.event for r in step.exit] == ["step.exit"]


@pytest.mark.parametrize(("when", "events"), [
    ("{{ event.name == 'call.done' and response.ok }}", {"call.done"}),
    ("{{ 'step.exit' == event.name }}", {"step.exit"}),
    ("{{ event.name in ['call.done', 'call.error'] }}", {"call.done", "call.error"}),
    ("{{ event.name == 'call.done' or event.name == 'step.exit' }}", {"call.done", "step.exit"}),
    ("{{ event.name == 'call.done' or flag }}", None),
    ("{{ flag }}", None),
    (None, None),
])
def test_events_named_reads_the_event_tests_of_a_guard(when: str | None,
                                                       events: set[str] | None) -> None:
    named = events_named(when)
    assert (None if named is None else set(named)) == events


def issues_of(body: str) -> list[str]:
    with pytest.raises(PlaybookError) as caught:
        parse_playbook(playbook_text(body), "test.yaml")
    return [str(i) for i in caught.value.issues if i.severity == "error"]


def test_case_action_that_does_nothing_on_its_event_is_an_error() -> None:
    (issue,) = issues_of("""
        workflow:
          - step: start
            case:
              - when: "{{ event.name == 'step.enter' }}"
                then:
                  call: {params: {page: 2}}
    """)
    assert 'test.yaml:8: step "start" field "case[0].then.call"' in issue
    assert '"call" does nothing on step.enter' in issue


def test_case_unknown_actions_are_errors() -> None:
    (issue,) = issues_of("""
        workflow:
          - step: start
            case:
              - when: "{{ event.name == 'call.done' }}"
                then:
                  colect: {from: result, into: x}
    """)
    assert 'unknown action "colect"; did you mean "collect"?' in issue


def test_case_collect_needs_from_and_into() -> None:
    (issue,) = issues_of("""
        workflow:
          - step: start
            case:
              - when: "{{ event.name == 'call.done' }}"
                then:
                  collect: {into: pages}
    """)
    assert "collect needs `from`" in issue
