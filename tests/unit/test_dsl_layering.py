"""Spec layering (spec 002 §3): kind defaults <- executor.spec <- step <- loop <- task."""

from __future__ import annotations

import pytest
from unit_helpers import FILE, parse, playbook_text

from noetl_stream.dsl import parse_playbook
from noetl_stream.dsl.layering import KIND_DEFAULTS, merge
from noetl_stream.errors import PlaybookError


def test_merge_deep_merges_mappings_and_the_later_layer_wins() -> None:
    outer = {"timeout": 10, "http": {"retries": 1, "headers": {"a": "1"}}}
    inner = {"timeout": 20, "http": {"headers": {"b": "2"}}}
    assert merge(outer, inner) == {"timeout": 20,
                                   "http": {"retries": 1, "headers": {"a": "1", "b": "2"}}}


def test_merge_replaces_lists_and_scalars_and_a_scalar_replaces_a_mapping() -> None:
    assert merge({"tags": ["a", "b"], "x": {"y": 1}}, {"tags": ["c"], "x": 5}) == {"tags": ["c"], "x": 5}
    assert merge({"x": 5}, {"x": {"y": 1}}) == {"x": {"y": 1}}


def test_merge_copies_so_the_result_shares_nothing_with_its_layers() -> None:
    outer = {"http": {"headers": {"a": "1"}}, "tags": ["a"]}
    merged = merge(outer)
    merged["http"]["headers"]["b"] = "2"
    merged["tags"].append("b")
    assert outer == {"http": {"headers": {"a": "1"}}, "tags": ["a"]}


LAYERED = """
    executor:
      spec:
        timeout: 10
        transaction: true
        labels: {team: data, tier: gold}
        policy: {limits: {max_payload_bytes: 4096}}
    workflow:
      - step: start
        spec:
          timeout: 20
          idempotent: true
          labels: {tier: silver}
          policy:
            admit:
              rules:
                - else: {then: {allow: true}}
        loop:
          in: [1, 2]
          iterator: n
          spec: {mode: parallel, max_in_flight: 2, timeout: 30, tags: [loop]}
        tool:
          - name: own
            kind: python
            code: "result = n"
            spec: {timeout: 40, tags: [task], labels: {owner: me}}
          - name: loop_level
            kind: python
            code: "result = n"
          - name: fetch
            kind: http
            url: http://localhost/x
            spec:
              policy:
                rules:
                  - else: {then: {do: continue}}
      - step: plain
        tool:
          - name: from_executor
            kind: shell
            command: "true"
          - name: nothing_set
            kind: noop
"""


def test_each_layer_overrides_the_one_around_it() -> None:
    pb = parse(LAYERED)
    own, loop_level, fetch = pb.step("start").tasks
    assert own.spec == {"timeout": 40, "transaction": True, "idempotent": True, "tags": ["task"],
                        "labels": {"team": "data", "tier": "silver", "owner": "me"}}
    assert loop_level.spec == {"timeout": 30, "transaction": True, "idempotent": True,
                               "tags": ["loop"], "labels": {"team": "data", "tier": "silver"}}
    assert fetch.spec == loop_level.spec


def test_an_outer_layer_reaches_tasks_but_policy_and_the_executions_timeout_stay_in_scope() -> None:
    pb = parse(LAYERED)
    from_executor, nothing_set = pb.step("plain").tasks
    # executor.spec.timeout bounds the whole execution (dsl/execution_limits.py): a task keeps
    # its kind's default.
    assert from_executor.spec == {"timeout": 300.0, "transaction": True,
                                  "labels": {"team": "data", "tier": "gold"}}
    assert nothing_set.spec == {"transaction": True, "labels": {"team": "data", "tier": "gold"}}
    start = pb.step("start")
    assert all("policy" not in t.spec for s in pb.steps for t in s.tasks)
    assert start.admit  # the step's admission rules are still the step's
    assert start.tasks[2].has_policy  # and the task's own rules still the task's
    assert start.loop is not None and start.loop.mode == "parallel"
    assert "mode" not in start.tasks[0].spec and "max_in_flight" not in start.tasks[0].spec


def test_without_any_spec_a_task_gets_its_kind_defaults() -> None:
    pb = parse("""
        workflow:
          - step: start
            tool:
              - {name: a, kind: python, code: "result = 1"}
              - {name: b, kind: http, url: "http://localhost/"}
              - {name: c, kind: noop}
    """)
    a, b, c = pb.step("start").tasks
    assert a.spec == dict(KIND_DEFAULTS["python"]) == {"timeout": 300.0}
    assert b.spec == {"timeout": 60.0}
    assert c.spec == {}


@pytest.mark.parametrize("value", ["soon", "-1"])
def test_an_unusable_inherited_timeout_is_an_error_naming_the_task(value: str) -> None:
    text = playbook_text(f"""
workflow:
  - step: start
    spec: {{timeout: {value}}}
    tool:
      kind: python
      code: "result = 1"
""")
    with pytest.raises(PlaybookError) as info:
        parse_playbook(text, FILE)
    shown = repr(value) if value == "soon" else value
    assert [str(i) for i in info.value.issues] == [
        f'test.yaml:8: step "start" field "tool.start_task.spec.timeout": timeout must be a positive '
        f"number of seconds or a duration (30s, 5m, 1h), got {shown} (set by this task's spec or "
        "one around it: step, loop)"]


def test_executor_spec_that_is_not_a_mapping_is_an_error() -> None:
    with pytest.raises(PlaybookError) as info:
        parse_playbook(playbook_text("executor:\n  spec: [1]\nworkflow:\n  - step: start\n"), FILE)
    assert [str(i) for i in info.value.issues] == [
        'test.yaml:5: field "executor.spec": executor.spec must be a mapping']
