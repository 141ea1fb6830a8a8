"""The `retry:` clause (spec 004 §7, 001 §4) and `poll:` normalized into task policy rules and
`Task.poll`, field by field, and the errors a clause that cannot be read gives."""

from __future__ import annotations

import pytest
from unit_helpers import parse, playbook_text

from noetl_stream.dsl import parse_playbook
from noetl_stream.dsl.models import PollSpec, Rule, Task
from noetl_stream.errors import PlaybookError


def tasks_of(body: str) -> tuple[Task, ...]:
    return parse(body).step("start").tasks


def issues_of(body: str) -> list[str]:
    with pytest.raises(PlaybookError) as caught:
        parse_playbook(playbook_text(body), "test.yaml")
    return [str(issue) for issue in caught.value.issues]


def test_clause_from_spec_004_becomes_a_stop_rule_ahead_of_a_retry_rule() -> None:
    (task,) = tasks_of("""
        workflow:
          - step: start
            tool: {kind: http, url: http://api}
            retry:
              max_attempts: 4
              initial_delay: 0.5
              backoff_multiplier: 3
              retry_when: "{{ status_code == 503 }}"
              stop_when: "{{ attempt > 2 }}"
    """)
    stop, retry = task.rules
    assert stop == Rule(when="{{ (attempt > 2) and not success }}", do="fail", attempts=4,
                        scope="tool", line=8)
    assert retry == Rule(when="{{ (status_code == 503) and not (attempt > 2) }}", do="retry",
                         attempts=4, backoff="exponential", delay=0.5, multiplier=3.0,
                         scope="tool", line=8)


def test_clause_without_conditions_retries_failed_calls_with_fixed_waits() -> None:
    (task,) = tasks_of("""
        workflow:
          - step: start
            tool: {kind: noop}
            retry: {max_attempts: 2, initial_delay: 1}
    """)
    (rule,) = task.rules
    assert (rule.when, rule.do, rule.attempts, rule.backoff, rule.delay, rule.multiplier,
            rule.max_delay, rule.jitter, rule.scope) == (
        "{{ not success }}", "retry", 2, "fixed", 1.0, None, None, False, "tool")


def test_stop_when_alone_retries_until_it_holds() -> None:
    (task,) = tasks_of("""
        workflow:
          - step: start
            tool: {kind: noop}
            retry: {stop_when: "{{ result.ready }}"}
    """)
    assert [r.when for r in task.rules] == ["{{ (result.ready) and not success }}",
                                           "{{ not (result.ready) }}"]
    assert task.rules[1].attempts == 3  # the Rule default: three attempts in all


def test_spec_001_backoff_block_and_chain_scope() -> None:
    first, second = tasks_of("""
        workflow:
          - step: start
            tool:
              - a: {kind: noop}
              - b:
                  kind: noop
                  retry:
                    scope: chain
                    max_attempts: 5
                    backoff: {type: linear, delay_seconds: 2s, max_delay_seconds: 1m, jitter: true}
    """)
    assert first.rules == ()
    (rule,) = second.rules
    assert (rule.scope, rule.attempts, rule.backoff, rule.delay, rule.max_delay, rule.jitter) == (
        "chain", 5, "linear", 2.0, 60.0, True)


def test_short_forms_and_backoff_type_string() -> None:
    a, b = tasks_of("""
        workflow:
          - step: start
            tool:
              - a: {kind: noop, retry: 4}
              - b: {kind: noop, retry: {backoff: exponential, delay: 250ms, on: error}}
    """)
    assert (a.rules[0].attempts, a.rules[0].backoff) == (4, "fixed")
    assert (b.rules[0].backoff, b.rules[0].delay, b.rules[0].multiplier) == ("exponential", 0.25, None)


def test_step_retry_is_inherited_by_tasks_without_their_own() -> None:
    a, b = tasks_of("""
        workflow:
          - step: start
            retry: {max_attempts: 2}
            tool:
              - a: {kind: noop}
              - b: {kind: noop, retry: {max_attempts: 7, scope: step}}
    """)
    assert [r.attempts for r in a.rules] == [2]
    assert [(r.attempts, r.scope) for r in b.rules] == [(7, "tool")]


def test_clause_rules_go_ahead_of_the_task_policy_rules() -> None:
    (task,) = tasks_of("""
        workflow:
          - step: start
            tool:
              kind: noop
              retry: {max_attempts: 2}
              spec:
                policy:
                  rules:
                    - else: {then: {do: continue}}
    """)
    assert [(r.do, r.scope) for r in task.rules] == [("retry", "tool"), ("continue", None)]
    assert task.has_policy


def test_poll_block_normalizes_durations() -> None:
    (task,) = tasks_of("""
        workflow:
          - step: start
            tool:
              kind: noop
              retry: {on: error, max_attempts: 3}
              poll: {until: "{{ result.status == 'ready' }}", interval: 5s, max_attempts: 60, deadline: 300s}
    """)
    assert task.poll == PollSpec(until="{{ result.status == 'ready' }}", interval=5.0,
                                 max_attempts=60, deadline=300.0, line=10)
    assert [r.do for r in task.rules] == ["retry"]


def test_step_poll_applies_to_a_single_task_step() -> None:
    (task,) = tasks_of("""
        workflow:
          - step: start
            tool: {kind: noop}
            poll: {until: "{{ result }}", interval: 1}
    """)
    assert task.poll is not None and task.poll.interval == 1.0 and task.poll.max_attempts is None


@pytest.mark.parametrize(("clause", "expected"), [
    ("{max_attempts: 0}", 'field "retry.max_attempts": counts every attempt, the first included'),
    ("{max_attempt: 3}", 'field "retry.max_attempt": unknown key "max_attempt"; did you mean '
                         '"max_attempts"?'),
    ("{scope: branch}", 'field "retry.scope": scope "branch" is not tool or chain'),
    ("{backoff: {type: random}}", 'field "retry.backoff.type": backoff type "random"'),
    ("{on: timeout}", 'field "retry.on": only `on: error` is supported'),
    ("{initial_delay: soon}", "field \"retry.initial_delay\": 'soon' is not a duration"),
    ("{retry_when: 'a {{ x }} b'}", 'field "retry.retry_when": must be one `{{ expression }}`'),
    ("[3]", 'field "retry": retry is a mapping'),
])
def test_clause_errors_name_line_step_and_field(clause: str, expected: str) -> None:
    issues = issues_of(f"""
        workflow:
          - step: start
            tool: {{kind: noop}}
            retry: {clause}
    """)
    assert len(issues) == 1
    assert issues[0].startswith('test.yaml:8: step "start"'), issues[0]
    assert expected in issues[0], issues[0]


def test_poll_errors() -> None:
    issues = issues_of("""
        workflow:
          - step: start
            tool:
              - a: {kind: noop, poll: {interval: 1}}
              - b: {kind: noop, poll: {until: "{{ x }}", deadline: 0}}
          - step: two
            tool:
              - a: {kind: noop}
              - b: {kind: noop}
            poll: {until: "{{ x }}"}
    """)
    assert len(issues) == 3, issues
    assert 'step "start" field "tool.poll": poll is a mapping with `until`' in issues[0]
    assert 'field "tool.poll": poll is invalid' in issues[1]
    assert 'step "two" field "poll": a step-level `poll:` needs a step with one task' in issues[2]
