"""Every accepted authoring form normalizes to the one canonical IR (ARCHITECTURE §8)."""

from __future__ import annotations

from typing import Any

import pytest
from unit_helpers import FILE, parse, playbook_text

from noetl_stream.dsl import Arc, LoopSpec, NextSpec, Rule, Step, Task, parse_playbook
from noetl_stream.dsl.models import AdmitRule


def without_lines(value: Any) -> Any:
    """A model dump with every `line` field removed, to compare forms written on different lines."""
    if isinstance(value, dict):
        return {k: without_lines(v) for k, v in value.items() if k != "line"}
    if isinstance(value, list):
        return [without_lines(v) for v in value]
    return value


def ir(model: Step | Task | NextSpec | Arc | Rule | LoopSpec) -> Any:
    return without_lines(model.model_dump(mode="json"))


def step_of(body: str, name: str = "start", **kwargs: Any) -> Step:
    return parse(body, **kwargs).step(name)


ENDS = """
          - step: a
          - step: b
"""


# -- playbook level ------------------------------------------------------------------------------

def test_playbook_header_metadata_and_workload_reach_the_ir() -> None:
    playbook = parse("""
        workload:
          items: [1, 2]
          api_url: http://example
        workflow:
          - step: start
    """)
    assert playbook.api_version == "noetl.io/v2"
    assert playbook.kind == "Playbook"
    assert playbook.name == "test"
    assert playbook.file == "test.yaml"
    assert playbook.workload == {"items": [1, 2], "api_url": "http://example"}
    assert [s.name for s in playbook.steps] == ["start"]


def test_playbook_start_step_is_the_step_named_start_else_the_first() -> None:
    named = parse("""
        workflow:
          - step: other
          - step: start
    """)
    unnamed = parse("""
        workflow:
          - step: first
          - step: second
    """)
    assert named.start_step.name == "start"
    assert unnamed.start_step.name == "first"


def test_step_without_tool_is_one_noop_task() -> None:
    step = step_of("""
        workflow:
          - step: start
    """)
    assert [(t.name, t.kind) for t in step.tasks] == [("start_task", "noop")]
    assert step.next == NextSpec()


def test_step_lines_point_at_the_step_entry() -> None:
    playbook = parse("""
        workflow:
          - step: start
            next: b
          - step: b
    """)
    assert playbook.step("start").line == 6
    assert playbook.step("b").line == 8
    assert playbook.step("start").next.arcs[0].line == 7


# -- next ---------------------------------------------------------------------------------------

def test_next_as_string_is_one_exclusive_arc() -> None:
    step = step_of("""
        workflow:
          - step: start
            next: a
    """ + ENDS)
    assert ir(step.next) == ir(NextSpec(mode="exclusive", arcs=(Arc(step="a"),)))


def test_next_as_list_of_strings_is_inclusive() -> None:
    step = step_of("""
        workflow:
          - step: start
            next: [a, b]
    """ + ENDS)
    assert ir(step.next) == ir(NextSpec(mode="inclusive", arcs=(Arc(step="a"), Arc(step="b"))))


def test_next_as_list_of_step_args_is_inclusive_with_args() -> None:
    step = step_of("""
        workflow:
          - step: start
            next:
              - step: a
                args: {page: 1}
              - step: b
                input: {page: 2}
    """ + ENDS)
    assert ir(step.next) == ir(NextSpec(mode="inclusive", arcs=(
        Arc(step="a", args={"page": 1}), Arc(step="b", args={"page": 2}))))


def test_canonical_next_keeps_mode_and_arc_fields() -> None:
    step = step_of("""
        workflow:
          - step: start
            next:
              spec: {mode: inclusive}
              arcs:
                - step: a
                  when: "{{ result.ok }}"
                  args: {n: "{{ result.n }}"}
                  set: {ctx.seen: true, total: "{{ result.n }}"}
                - step: b
    """ + ENDS)
    assert ir(step.next) == ir(NextSpec(mode="inclusive", arcs=(
        Arc(step="a", when="{{ result.ok }}", args={"n": "{{ result.n }}"},
            set_ctx={"seen": True, "total": "{{ result.n }}"}),
        Arc(step="b"),
    )))


def test_canonical_next_defaults_to_exclusive() -> None:
    step = step_of("""
        workflow:
          - step: start
            next:
              arcs:
                - step: a
                  when: "{{ false }}"
                - step: b
    """ + ENDS)
    assert step.next.mode == "exclusive"
    assert [a.step for a in step.next.arcs] == ["a", "b"]


def test_next_to_implicit_end_is_accepted() -> None:
    step = step_of("""
        workflow:
          - step: start
            next: end
    """)
    assert [a.step for a in step.next.arcs] == ["end"]


# -- step inputs, set, vars, admission ------------------------------------------------------------

def test_step_input_and_args_are_one_args_mapping() -> None:
    step = step_of("""
        workflow:
          - step: start
            input: {a: 1, b: "{{ workload.x }}"}
            args: {c: 3}
    """)
    assert step.args == {"a": 1, "b": "{{ workload.x }}", "c": 3}


def test_step_set_writes_ctx_and_vars_prefix_goes_to_vars() -> None:
    step = step_of("""
        workflow:
          - step: start
            set:
              ctx.total: "{{ result.n }}"
              plain: 1
              vars.kept: "{{ result.id }}"
            vars:
              other: 2
    """)
    assert step.set_ctx == {"total": "{{ result.n }}", "plain": 1}
    assert step.vars == {"other": 2, "kept": "{{ result.id }}"}


def test_step_when_is_an_admission_rule_with_a_deny_fallback() -> None:
    step = step_of("""
        workflow:
          - step: start
            when: "{{ workload.enabled }}"
    """)
    assert step.admit == (AdmitRule(when="{{ workload.enabled }}", allow=True),
                          AdmitRule(when=None, allow=False))


def test_spec_policy_admit_rules_normalize_with_else() -> None:
    step = step_of("""
        workflow:
          - step: start
            spec:
              policy:
                admit:
                  rules:
                    - when: "{{ ctx.ready }}"
                      then: {allow: true}
                    - else:
                        then: {allow: false}
    """)
    assert step.admit == (AdmitRule(when="{{ ctx.ready }}", allow=True),
                          AdmitRule(when=None, allow=False))


def test_step_spec_and_pool_are_kept() -> None:
    step = step_of("""
        workflow:
          - step: start
            pool: gpu
            spec: {timeout: 30}
    """)
    assert step.pool == "gpu"
    assert step.spec == {"timeout": 30}


# -- task list shapes -----------------------------------------------------------------------------

def test_single_tool_mapping_is_a_task_named_after_the_step() -> None:
    step = step_of("""
        workflow:
          - step: start
            tool:
              kind: python
              code: "result = 1"
    """)
    assert ir(step.tasks[0]) == ir(Task(name="start_task", kind="python", config={"code": "result = 1"},
                                        spec={"timeout": 300.0}))  # the kind's default


def test_task_list_shapes_normalize_to_the_same_named_tasks() -> None:
    named = step_of("""
        workflow:
          - step: start
            tool:
              - name: task_0
                kind: noop
              - name: task_1
                kind: python
                code: "result = 2"
    """)
    unnamed = step_of("""
        workflow:
          - step: start
            tool:
              - kind: noop
              - kind: python
                code: "result = 2"
    """)
    labelled = step_of("""
        workflow:
          - step: start
            tool:
              - task_0:
                  kind: noop
              - task_1:
                  kind: python
                  code: "result = 2"
    """)
    expected = [ir(Task(name="task_0", kind="noop")),
                ir(Task(name="task_1", kind="python", config={"code": "result = 2"},
                        spec={"timeout": 300.0}))]
    assert [ir(t) for t in named.tasks] == expected
    assert [ir(t) for t in unnamed.tasks] == expected
    assert [ir(t) for t in labelled.tasks] == expected


def test_task_input_args_spec_and_config_are_separated() -> None:
    step = step_of("""
        workflow:
          - step: start
            tool:
              kind: http
              method: GET
              url: "{{ workload.api_url }}/items"
              input: {a: 1}
              args: {b: 2}
              spec: {timeout: 5}
    """)
    task = step.tasks[0]
    assert task.config == {"method": "GET", "url": "{{ workload.api_url }}/items"}
    assert task.input == {"a": 1, "b": 2}
    assert task.spec == {"timeout": 5}
    assert task.has_policy is False


def test_task_set_splits_ctx_iter_and_locals_like_set_ctx_and_set_iter() -> None:
    scoped = step_of("""
        workflow:
          - step: start
            tool:
              kind: noop
              set:
                ctx.x: "{{ result.x }}"
                iter.y: 2
                z: 3
    """).tasks[0]
    explicit = step_of("""
        workflow:
          - step: start
            tool:
              kind: noop
              set: {z: 3}
              set_ctx: {x: "{{ result.x }}"}
              set_iter: {y: 2}
    """).tasks[0]
    assert (scoped.set_ctx, scoped.set_iter, scoped.set_locals) == (
        {"x": "{{ result.x }}"}, {"y": 2}, {"z": 3})
    assert ir(scoped) == ir(explicit)


# -- task policy rules ----------------------------------------------------------------------------

def test_task_policy_rules_when_then_and_both_else_forms() -> None:
    def rules_of(else_entry: str) -> tuple[Rule, ...]:
        return step_of(f"""
            workflow:
              - step: start
                tool:
                  kind: noop
                  spec:
                    policy:
                      rules:
                        - when: "{{{{ outcome.status == 'error' }}}}"
                          then:
                            do: retry
                            max_attempts: 4
                            backoff: exponential
                            delay: 0.5
                            set: {{ctx.failed: true, iter.n: 1, tmp: 2}}
                        - {else_entry}
        """).tasks[0].rules

    with_then = rules_of("else: {then: {do: fail}}")
    bare = rules_of("else: {do: fail}")
    assert ir(with_then[0]) == ir(Rule(when="{{ outcome.status == 'error' }}", do="retry", attempts=4,
                                       backoff="exponential", delay=0.5, set_ctx={"failed": True},
                                       set_iter={"n": 1}, set_locals={"tmp": 2}))
    assert ir(with_then[1]) == ir(Rule(when=None, do="fail"))
    assert [ir(r) for r in bare] == [ir(r) for r in with_then]
    task = step_of("""
        workflow:
          - step: start
            tool:
              kind: noop
              spec:
                policy:
                  rules:
                    - else: {do: continue}
    """).tasks[0]
    assert task.has_policy is True


def test_task_policy_jump_names_a_task_of_the_step() -> None:
    step = step_of("""
        workflow:
          - step: start
            tool:
              - first:
                  kind: noop
                  spec:
                    policy:
                      rules:
                        - when: "{{ outcome.status == 'ok' }}"
                          then: {do: jump, to: third}
              - second: {kind: noop}
              - third: {kind: noop}
    """)
    assert step.tasks[0].rules[0].do == "jump"
    assert step.tasks[0].rules[0].to == "third"


# -- loops ----------------------------------------------------------------------------------------

def test_loop_in_iterator_and_collection_element_normalize_alike() -> None:
    a = step_of("""
        workflow:
          - step: start
            loop:
              in: "{{ workload.items }}"
              iterator: item
    """).loop
    b = step_of("""
        workflow:
          - step: start
            loop:
              collection: "{{ workload.items }}"
              element: item
    """).loop
    assert a is not None and b is not None
    assert ir(a) == ir(b) == ir(LoopSpec(collection="{{ workload.items }}", iterator="item"))
    assert a.mode == "sequential"
    assert a.max_in_flight is None


@pytest.mark.parametrize("loop_keys", [
    "spec: {mode: parallel, max_in_flight: 3}",
    "mode: parallel\n      max_in_flight: 3",
], ids=["under-spec", "on-loop"])
def test_loop_mode_and_max_in_flight_from_spec_or_loop(loop_keys: str) -> None:
    loop = parse("workflow:\n  - step: start\n    loop:\n      in: [1, 2, 3]\n      iterator: x\n"
                 f"      {loop_keys}\n").step("start").loop
    assert loop is not None
    assert (loop.collection, loop.mode, loop.max_in_flight) == ([1, 2, 3], "parallel", 3)


# -- workbook -------------------------------------------------------------------------------------

def test_workbook_task_is_inlined_with_caller_inputs_on_top() -> None:
    step = step_of("""
        workbook:
          - name: greet
            tool:
              kind: python
              code: "result = greeting + ' ' + who"
              input:
                greeting: hello
                who: null
        workflow:
          - step: start
            tool:
              kind: workbook
              name: greet
              args: {who: world}
    """)
    assert ir(step.tasks[0]) == ir(Task(
        name="start_task", kind="python", config={"code": "result = greeting + ' ' + who"},
        input={"greeting": "hello", "who": "world"}, spec={"timeout": 300.0}))


def test_workbook_entry_without_tool_key_is_the_task_itself() -> None:
    step = step_of("""
        workbook:
          - name: ping
            kind: noop
        workflow:
          - step: start
            tool:
              - check: {kind: workbook, name: ping}
    """)
    assert [(t.name, t.kind) for t in step.tasks] == [("check", "noop")]


# -- warnings -------------------------------------------------------------------------------------

def test_unknown_key_is_a_warning_and_the_playbook_still_parses() -> None:
    result = parse_playbook(playbook_text("""
        workflow:
          - step: start
            assert: {ok: true}
    """), FILE)
    assert [w.severity for w in result.warnings] == ["warning"]
    assert result.playbook.step("start").tasks[0].kind == "noop"
