"""NoETL's spellings of tool fields the parser accepts: `cmds:`/`cmd:`/`shell:` of a shell task,
`timeout_seconds:` of any kind with a timeout.
"""

from __future__ import annotations

import pytest
from unit_helpers import parse

from noetl_stream.errors import PlaybookError


def test_shell_cmds_cmd_and_shell_are_fields_of_a_shell_task() -> None:
    playbook = parse("""
        workflow:
          - step: start
            tool:
              kind: shell
              shell: bash
              cmds:
                - echo "{{ workload.x | default('a') }}"
                - |
                  set -e
                  ls
            next: [one]
          - step: one
            tool: {kind: shell, cmd: "echo one"}
    """, strict=True)

    assert playbook.step("start").tasks[0].config == {
        "shell": "bash", "cmds": ["echo \"{{ workload.x | default('a') }}\"", "set -e\nls\n"]}
    assert playbook.step("one").tasks[0].config == {"cmd": "echo one"}


@pytest.mark.parametrize("kind_fields", [
    "kind: http, url: 'http://x'", "kind: shell, cmds: [true]", "kind: python, code: 'result = 1'",
    "kind: postgres, query: 'select 1', auth: pg", "kind: duckdb, query: 'select 1'",
])
def test_timeout_seconds_is_read_as_the_task_timeout(kind_fields: str) -> None:
    playbook = parse(f"""
        workflow:
          - step: start
            tool: {{{kind_fields}, timeout_seconds: 7}}
    """, strict=True)

    config = playbook.step("start").tasks[0].config
    assert config["timeout"] == 7
    assert "timeout_seconds" not in config


def test_timeout_seconds_and_a_different_timeout_is_an_error() -> None:
    with pytest.raises(PlaybookError, match='"timeout_seconds" is the older spelling of "timeout"'):
        parse("""
            workflow:
              - step: start
                tool: {kind: http, url: "http://x", timeout: 3, timeout_seconds: 7}
        """)


@pytest.mark.parametrize("tool", [
    "{kind: result_fetch, ref: '{{ big.result.reference.ref }}'}",
    "{kind: artifact, action: get, input: {result_ref: '{{ big._ref }}'}}",
])
def test_kinds_reading_noetl_result_store_are_refused_with_what_to_write_instead(tool: str) -> None:
    with pytest.raises(PlaybookError) as caught:
        parse(f"""
            workflow:
              - step: start
                tool: {tool}
        """)

    (issue,) = caught.value.issues
    assert issue.step == "start" and issue.field == "tool.kind"
    assert "is not supported: it reads NoETL's result store" in issue.message
    assert "read directly in templates however large it is" in issue.message


def test_playbook_task_reads_noetl_fields_and_warns_on_those_without_effect() -> None:
    from unit_helpers import playbook_text

    from noetl_stream.dsl import parse_playbook

    parsed = parse_playbook(playbook_text("""
        workflow:
          - step: start
            tool:
              kind: playbook
              path: catalog/child
              payload: {n: 1}
              return_result: true
              result_step: compute
              timeout_seconds: 30
              poll_interval: 2
    """), "p.yaml")

    task = parsed.playbook.step("start").tasks[0]
    assert task.config == {"path": "catalog/child", "payload": {"n": 1}, "return_result": True,
                           "result_step": "compute", "poll_interval": 2}
    assert task.spec["timeout"] == 30  # the task's timeout: the child is waited for that long
    assert [w.field for w in parsed.warnings] == ["tool.poll_interval"]


def test_script_source_code_is_the_python_code_and_is_rendered_like_it() -> None:
    playbook = parse("""
        workload: {test_code: "result = 1"}
        workflow:
          - step: start
            tool:
              kind: python
              script: {uri: inline, source: {type: inline, code: "{{ test_code }}"}}
            next: [untyped]
          - step: untyped
            tool: {kind: python, script: {source: {code: "result = 2"}}}
    """, strict=True)

    assert playbook.step("start").tasks[0].config == {"code": "{{ test_code }}"}
    assert playbook.step("untyped").tasks[0].config == {"code": "result = 2"}


def test_flat_code_beside_script_source_code_wins_with_a_warning() -> None:
    from unit_helpers import playbook_text

    from noetl_stream.dsl import parse_playbook

    parsed = parse_playbook(playbook_text("""
        workflow:
          - step: flat
            tool: {kind: python, code: "result = 3", script: {source: {code: "result = 4"}}}
    """), "p.yaml")

    assert parsed.playbook.step("flat").tasks[0].config == {"code": "result = 3"}
    (warning,) = parsed.warnings
    assert warning.field == "tool.script" and "script.source.code is ignored" in warning.message


def test_script_source_code_with_a_file_type_is_an_error() -> None:
    with pytest.raises(PlaybookError, match=r"script.source.code is the text of an inline source, "
                                            r'but script.source.type is "file"'):
        parse("""
            workflow:
              - step: start
                tool:
                  kind: python
                  script: {uri: ./x.py, source: {type: file, code: "result = 1"}}
        """)


@pytest.mark.parametrize(("uri", "source_type"), [
    ("gs://bucket/x.py", "gcs"), ("s3://bucket/x.py", "s3"), ("https://host/x.py", "http")])
def test_remote_script_sources_are_refused_naming_the_source_and_what_to_write(
        uri: str, source_type: str) -> None:
    with pytest.raises(PlaybookError) as caught:
        parse(f"""
            workflow:
              - step: start
                tool:
                  kind: python
                  script: {{uri: "{uri}", source: {{type: {source_type}}}}}
        """)

    (issue,) = caught.value.issues
    assert issue.field == "tool.script.source.type"
    assert f'script source "{source_type}" ({uri}) is not supported' in issue.message
    assert "use `source: {type: file}`" in issue.message


def test_shell_capture_is_accepted_and_reported_as_without_effect() -> None:
    from unit_helpers import playbook_text

    from noetl_stream.dsl import parse_playbook

    parsed = parse_playbook(playbook_text("""
        workflow:
          - step: start
            tool: {kind: shell, cmds: ["true"], capture: false}
    """), "p.yaml")

    (warning,) = parsed.warnings
    assert warning.field == "tool.capture" and "output is always captured" in warning.message
