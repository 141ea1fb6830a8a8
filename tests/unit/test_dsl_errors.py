"""One test per validation message, naming file, line, step and field: `FILE:LINE: step "S" field "F": ...`.

The header in unit_helpers is 4 lines, so the first body line of every playbook is line 5.
"""

from __future__ import annotations

import pytest
from unit_helpers import FILE, HEADER, playbook_text

from noetl_stream.dsl import parse_playbook
from noetl_stream.errors import Issue, PlaybookError


def issues_of(text: str, *, strict: bool = False) -> list[str]:
    with pytest.raises(PlaybookError) as caught:
        parse_playbook(text, FILE, strict=strict)
    return [str(i) for i in caught.value.issues if i.severity == "error"]


def only_issue(body: str, *, strict: bool = False) -> str:
    found = issues_of(playbook_text(body), strict=strict)
    assert len(found) == 1, found
    return found[0]


def test_wrong_api_version_names_the_field_and_the_expected_value() -> None:
    text = "apiVersion: noetl.io/v1\nkind: Playbook\nmetadata: {name: t}\nworkflow:\n  - step: start\n"
    assert issues_of(text) == [
        'test.yaml:1: field "apiVersion": apiVersion is "noetl.io/v1"; this runtime reads "noetl.io/v2"']


def test_missing_api_version_is_an_error() -> None:
    text = "kind: Playbook\nmetadata: {name: t}\nworkflow:\n  - step: start\n"
    assert issues_of(text) == [
        'test.yaml:1: field "apiVersion": apiVersion is missing; this runtime reads "noetl.io/v2"']


@pytest.mark.parametrize("meta,line,field", [
    ('{name: "bad\\u0007name"}', 3, "name"),
    ("\n  name: t\n  path: " + "p" * 4097, 5, "path"),
    ("\n  name: t\n  path: [a]", 5, "path"),
])
def test_metadata_text_a_command_cannot_carry_is_refused_at_its_line(
        meta: str, line: int, field: str) -> None:
    # Every command of the execution carries metadata.path (or .name): a value the message
    # models refuse would otherwise fail the execution only once it runs.
    text = f"apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {meta}\nworkflow:\n  - step: start\n"
    assert issues_of(text) == [
        f'test.yaml:{line}: field "metadata.{field}": metadata.{field} is text of 1 to 4096 '
        "characters without control characters"]


def test_arc_to_missing_step_suggests_the_nearest_name() -> None:
    message = only_issue("""
        workflow:
          - step: start
            next: fetchh
          - step: fetch
    """)
    assert message == ('test.yaml:7: step "start" field "next": arc goes to step "fetchh", which does not '
                       'exist; did you mean "fetch"?')


def test_arc_in_a_list_points_at_its_own_line() -> None:
    message = only_issue("""
        workflow:
          - step: start
            next:
              - step: a
              - step: nowhere
          - step: a
    """)
    assert message.startswith('test.yaml:9: step "start" field "next": arc goes to step "nowhere"')


def test_unknown_tool_kind_suggests_the_nearest_kind() -> None:
    message = only_issue("""
        workflow:
          - step: start
            tool:
              kind: pyhton
              code: "result = 1"
    """)
    assert message == ('test.yaml:8: step "start" field "tool.kind": unknown tool kind "pyhton"; '
                       'did you mean "python"?')


def test_known_kind_this_installation_cannot_run_says_so() -> None:
    text = playbook_text("""
        workflow:
          - step: start
            tool: {kind: playbook, path: ./child.yaml}
    """)
    with pytest.raises(PlaybookError) as caught:
        parse_playbook(text, FILE, kinds={"python"})
    assert [str(i) for i in caught.value.issues] == [
        'test.yaml:7: step "start" field "tool.kind": tool kind "playbook" is not available in '
        "this version of noetl-stream yet"]


@pytest.mark.parametrize("kind", ["snowflake", "container", "agent"])
def test_noetl_kind_this_build_does_not_run_says_so_rather_than_suggesting_a_typo(kind: str) -> None:
    message = only_issue(f"""
        workflow:
          - step: start
            tool: {{kind: {kind}, command: "select 1"}}
    """)
    assert message.startswith(f'test.yaml:7: step "start" field "tool.kind": NoETL form not run '
                              f'here: tool kind "{kind}"; instead, ')


def test_playbook_task_without_path_names_the_field() -> None:
    message = only_issue("""
        workflow:
          - step: start
            tool: {kind: playbook, args: {n: 1}}
    """)
    assert message == ('test.yaml:7: step "start" field "tool.path": playbook task needs `path:` '
                       "(a catalog path or ./file.yaml)")


def test_unknown_key_is_a_warning_naming_file_line_step_and_suggestion() -> None:
    result = parse_playbook(playbook_text("""
        workflow:
          - step: start
            nxet: b
          - step: b
    """), FILE)
    assert [str(w) for w in result.warnings] == [
        'test.yaml:7: step "start" field "nxet": warning: unknown key "nxet"; did you mean "next"?',
        # what the typo costs: `b` is no longer reached
        'test.yaml:8: step "b" field "step": warning: no path from the start step "start" reaches '
        "this step: it never runs"]


def test_unknown_key_is_an_error_when_strict() -> None:
    message = issues_of(playbook_text("""
        workflow:
          - step: start
            nxet: b
          - step: b
    """), strict=True)[0]
    assert message == 'test.yaml:7: step "start" field "nxet": unknown key "nxet"; did you mean "next"?'


def test_jump_to_unknown_task_suggests_the_nearest_task() -> None:
    message = only_issue("""
        workflow:
          - step: start
            tool:
              - first:
                  kind: noop
                  spec:
                    policy:
                      rules:
                        - when: "{{ outcome.status == 'error' }}"
                          then: {do: jump, to: secnd}
              - second: {kind: noop}
    """)
    assert message == ('test.yaml:13: step "start" field "tool.first.spec.policy": jump target "secnd" '
                       'is not a task of this step; did you mean "second"?')


def test_bad_template_syntax_names_the_field_and_the_template() -> None:
    message = only_issue("""
        workflow:
          - step: start
            tool:
              kind: http
              url: "{{ workload.url "
    """)
    assert message.startswith('test.yaml:9: step "start" field "tool.url": template '
                              "'{{ workload.url ' does not parse: ")


def test_bad_template_in_arc_guard_names_the_arc() -> None:
    message = only_issue("""
        workflow:
          - step: start
            next:
              - step: b
                when: "{{ result.ok == }}"
          - step: b
    """)
    assert message.startswith('test.yaml:8: step "start" field "next.arcs[0]": template ')


def test_loop_without_iterator_is_an_error() -> None:
    message = only_issue("""
        workflow:
          - step: start
            loop:
              in: "{{ workload.items }}"
            tool: {kind: noop}
    """)
    assert message == ('test.yaml:8: step "start" field "loop.iterator": '
                       "loop needs `iterator:` (or `element:`)")


def test_loop_without_collection_is_an_error() -> None:
    message = only_issue("""
        workflow:
          - step: start
            loop:
              iterator: x
    """)
    assert message == ('test.yaml:8: step "start" field "loop.in": loop needs `in:` (or '
                       "`collection:`), or a `cursor:` to claim from")


def test_unknown_workbook_task_suggests_the_nearest_name() -> None:
    message = only_issue("""
        workbook:
          - name: greet
            kind: noop
        workflow:
          - step: start
            tool: {kind: workbook, name: gret}
    """)
    assert message == ('test.yaml:10: step "start" field "tool.name": workbook task "gret" is not defined; '
                       'did you mean "greet"?')


def test_duplicate_step_name_is_an_error() -> None:
    message = only_issue("""
        workflow:
          - step: start
          - step: start
    """)
    assert message == 'test.yaml:7: step "start" field "step": step name is used twice'


def test_yaml_syntax_error_reports_the_line() -> None:
    text = HEADER + "workflow:\n  - step: start\n   next: b\n"
    assert issues_of(text) == [
        "test.yaml:7: YAML syntax error: expected <block end>, but found '<block mapping start>'"]


def test_every_issue_is_reported_at_once() -> None:
    with pytest.raises(PlaybookError) as caught:
        parse_playbook(playbook_text("""
            workflow:
              - step: start
                tool: {kind: pyhton}
                next: nowhere
        """), FILE)
    errors = [i for i in caught.value.issues if i.severity == "error"]
    assert {i.field for i in errors} == {"tool.kind", "next"}
    assert str(caught.value).startswith("playbook is invalid for 2 reasons:\n")
    assert isinstance(caught.value, ValueError)


def test_issue_text_without_step_or_line() -> None:
    assert str(Issue("f.yaml", None, "cannot read the file")) == "f.yaml: cannot read the file"
    assert str(Issue("f.yaml", 3, "bad", step="s")) == 'f.yaml:3: step "s": bad'
