"""The spec 001 step form (case_mode, branch_order, next_policy, `else`, `then` task lists,
`next: {to}`) compiled into the canonical IR, field by field, and its registration errors."""

from __future__ import annotations

import pytest
from unit_helpers import parse, playbook_text

from noetl_stream.dsl import parse_playbook
from noetl_stream.dsl.models import Arc, CaseBranch, CaseSpec, NextSpec, Rule
from noetl_stream.errors import PlaybookError

OK = "{{ outcome.status == 'ok' }}"

EXCLUSIVE = """
    workflow:
      - step: start
        tool: {kind: noop, input: {n: 5}}
        case:
          - when: "{{ result.n > 3 }}"
            then:
              - notify:
                  tool: {kind: noop, input: {sent: true}}
                  retry:
                    max_attempts: 4
                    backoff: {type: exponential, delay_seconds: 1, max_delay_seconds: 8}
              - next:
                  to: [{step: big, args: {n: "{{ result.n }}"}}]
          - else:
              - next: {to: [small]}
      - step: big
      - step: small
"""


def test_exclusive_case_compiles_to_selector_rules_chains_and_routed_arcs() -> None:
    step = parse(EXCLUSIVE).step("start")
    entry, notify, filler = step.tasks
    assert [t.name for t in step.tasks] == ["start_task", "notify", "start_else"]
    assert entry.rules == (
        Rule(when="{{ result.n > 3 }}", event="call.done", do="jump", to="notify",
             case_matched=["case_0"], line=9),
        Rule(when=OK, event="call.done", do="jump", to="start_else", case_matched=["else"],
             line=18),
        Rule(when=OK, do="break", case_matched=[]),
    )
    assert entry.has_policy
    assert notify.rules == (
        Rule(when="{{ not success }}", do="retry", attempts=4, scope="tool",
             backoff="exponential", delay=1.0, max_delay=8.0, line=9),
        Rule(when=OK, do="break", route="case[0]", line=9),
    )
    assert filler.kind == "noop"
    assert filler.rules == (Rule(when=OK, do="break", route="case[1]", result="{{ _prev }}",
                                 line=18),)
    assert step.next == NextSpec(arcs=(
        Arc(step="big", args={"n": "{{ result.n }}"}, route="case[0]", line=9),
        Arc(step="small", route="case[1]", line=18),
    ))
    assert step.case == CaseSpec(branches=(
        CaseBranch(name="case_0", route="case[0]", line=9),
        CaseBranch(name="else", route="case[1]", line=18)))


INCLUSIVE = """
    workflow:
      - step: start
        spec: {case_mode: inclusive, branch_order: priority, next_policy: break_chain}
        tool: {kind: noop, input: {total: 1500}}
        case:
          - when: "{{ workload.audit }}"
            priority: 1
            then:
              - audit: {tool: {kind: noop}}
          - when: "{{ result.total > 1000 }}"
            priority: 10
            then:
              - fraud: {tool: {kind: noop}}
              - next: {to: [review], policy: end_step}
          - when: "{{ event.name == 'call.done' }}"
            then:
              - next: {to: [done]}
      - step: review
      - step: done
"""


def test_inclusive_case_records_the_firing_set_once_and_orders_by_priority() -> None:
    step = parse(INCLUSIVE).step("start")
    assert [t.name for t in step.tasks] == ["start_task", "fraud", "audit", "start_case_2"]
    first, second, third, catch_all = step.tasks[0].rules
    assert (first.to, first.when) == ("fraud", "{{ result.total > 1000 }}")
    assert first.set_locals == {
        "_case_0": "{{ true if (workload.audit) else false }}",
        "_case_2": "{{ true if (event.name == 'call.done') else false }}"}
    assert first.case_matched == ("{{ ['case_1'] + (['case_0'] if _case_0 else []) + "
                                  "(['case_2'] if _case_2 else []) }}")
    assert (second.to, list(second.set_locals)) == ("audit", ["_case_2"])
    assert (third.to, third.set_locals, third.case_matched) == ("start_case_2", {}, ["case_2"])
    assert catch_all == Rule(when=OK, do="break", case_matched=[])
    # `policy: end_step` on the next overrides the step's break_chain: the chain ends the step.
    assert step.tasks[1].rules == (Rule(when=OK, do="break", route="case[1]", line=14),)
    # A chain without `next` goes on to the next selected branch, or ends the pipeline.
    assert step.tasks[2].rules == (
        Rule(when="{{ outcome.status == 'ok' and _case_2 }}", do="jump", to="start_case_2", line=10),
        Rule(when=OK, do="break", line=10))
    assert step.case is not None
    assert (step.case.mode, step.case.branch_order, step.case.next_policy) == (
        "inclusive", "priority", "break_chain")
    assert [(b.name, b.policy, b.priority) for b in step.case.branches] == [
        ("case_1", "end_step", 10), ("case_0", "break_chain", 1), ("case_2", "break_chain", 0)]


def test_defer_keeps_tasks_after_next_and_break_chain_jumps_on_with_its_route() -> None:
    step = parse("""
        workflow:
          - step: start
            spec: {case_mode: inclusive, next_policy: defer}
            case:
              - when: "{{ true }}"
                then:
                  - next: {to: [a]}
                  - after: {tool: {kind: noop}}
              - when: "{{ true }}"
                then:
                  - other: {tool: {kind: noop}}
          - step: a
    """).step("start")
    assert [t.name for t in step.tasks] == ["start_task", "after", "other"]
    assert step.tasks[1].rules == (
        Rule(when="{{ outcome.status == 'ok' and _case_1 }}", do="jump", to="other",
             route="case[0]", line=9),
        Rule(when=OK, do="break", route="case[0]", line=9))


def test_templated_step_name_becomes_one_guarded_arc_per_constant() -> None:
    step = parse("""
        workflow:
          - step: start
            case:
              - when: "{{ true }}"
                then:
                  - next:
                      to: [{step: "{{ 'ok' if result.valid else 'bad' }}"}]
          - step: ok
          - step: bad
    """).step("start")
    guard = "{{ event.name != 'step.failed' and ('ok' if result.valid else 'bad') == '%s' }}"
    assert step.next.arcs == (Arc(step="ok", when=guard % "ok", route="case[0]", line=8),
                              Arc(step="bad", when=guard % "bad", route="case[0]", line=8))


def test_structural_next_to_is_a_fork_of_every_target() -> None:
    step = parse("""
        workflow:
          - step: start
            next:
              to: [{step: a, args: {x: 1}}, {step: b}]
          - step: a
          - step: b
    """).step("start")
    assert step.next == NextSpec(mode="inclusive", arcs=(
        Arc(step="a", args={"x": 1}, line=7), Arc(step="b", line=7)))
    assert step.case is None


def test_spec000_case_is_left_to_the_case_dialect() -> None:
    step = parse("""
        workflow:
          - step: start
            case:
              - when: "{{ event.name == 'call.done' }}"
                then: {next: [{step: a}]}
          - step: a
    """).step("start")
    assert step.case is None
    assert step.tasks[0].rules[0].route == "case[0]"


def errors_of(body: str) -> list[tuple[int | None, str | None, str]]:
    with pytest.raises(PlaybookError) as info:
        parse_playbook(playbook_text(body), "test.yaml")
    return [(i.line, i.field, i.message) for i in info.value.issues if i.severity == "error"]


@pytest.mark.parametrize(("body", "field", "words"), [
    ("""
        workflow:
          - step: start
            case:
              - when: "{{ true }}"
                then:
                  - next: {to: [a], spec: {delay: soon}}
          - step: a
    """, "case[0].then[0].next.spec.delay", "a duration such as"),
    ("""
        workflow:
          - step: start
            next: {to: [a], spec: {delay: 5s, jitter: 1}}
          - step: a
    """, "next.spec.jitter", "unknown key"),
    ("""
        workflow:
          - step: start
            case:
              - when: "{{ true }}"
                then:
                  - next: {to: [a], priority: 3}
          - step: a
    """, "case[0].then[0].next.priority", "chooses among deferred routes"),
    ("""
        workflow:
          - step: start
            case:
              - when: "{{ true }}"
                then:
                  - next: {to: [a]}
                  - late: {tool: {kind: noop}}
          - step: a
    """, "case[0].then", "never run under next_policy end_step"),
    ("""
        workflow:
          - step: start
            case:
              - when: "{{ true }}"
                then:
                  - next: {to: [{step: "{{ result.target }}"}]}
          - step: a
    """, "case[0].then.next.to[0].step", "string constants"),
    ("""
        workflow:
          - step: start
            spec: {case_mode: inclusiv}
            case:
              - when: "{{ true }}"
                then: [{next: {to: [a]}}]
          - step: a
    """, "spec.case_mode", 'did you mean "inclusive"'),
    ("""
        workflow:
          - step: start
            case:
              - else: [{next: {to: [a]}}]
              - when: "{{ true }}"
                then: [{next: {to: [a]}}]
          - step: a
    """, "case[0]", "`else` is the last case entry"),
    ("""
        workflow:
          - step: start
            case:
              - when: "{{ true }}"
                then:
                  - next: {to: [nowhere]}
          - step: a
    """, "next", 'step "nowhere", which does not exist'),
])
def test_spec001_errors_name_the_field_and_the_fix(body: str, field: str, words: str) -> None:
    found = errors_of(body)
    assert any(f == field and words in message for _, f, message in found), found
