"""Every tool kind without the field it cannot run without is an error at validation, naming
file, line, step, task and field: not a warning that fails at run time.
"""

from __future__ import annotations

import pytest
from unit_helpers import FILE, playbook_text

from noetl_stream.dsl import parse_playbook
from noetl_stream.dsl.kinds import RUNNABLE_KINDS
from noetl_stream.dsl.required import REQUIRED
from noetl_stream.errors import PlaybookError
from noetl_stream.tools.registry import BUILTIN_TOOLS

# Kinds that need no single field: noop has none, transfer is checked field by field
# (dsl/transfer.py), workbook names another task.
NO_SINGLE_FIELD = {"noop", "transfer", "workbook"}


def errors_of(body: str) -> list[str]:
    with pytest.raises(PlaybookError) as caught:
        parse_playbook(playbook_text(body), FILE)
    return [str(i) for i in caught.value.issues if i.severity == "error"]


def test_every_runnable_kind_has_its_required_field_declared() -> None:
    # python's tool is built apart (it owns child processes), the others from BUILTIN_TOOLS
    assert {*BUILTIN_TOOLS, "python"} - NO_SINGLE_FIELD == set(REQUIRED)
    assert set(REQUIRED) == RUNNABLE_KINDS - NO_SINGLE_FIELD


def test_postgres_with_sql_instead_of_command_is_an_error_naming_the_stray_key() -> None:
    assert errors_of("""
        workflow:
          - step: start
            tool:
              kind: postgres
              auth: pg
              sql: select 1
    """) == ['test.yaml:7: step "start" field "tool.command": postgres task needs `command:` '
             "(or `query:`, `script:`); `sql:` is no postgres field"]


@pytest.mark.parametrize("kind", sorted(REQUIRED))
def test_a_task_of_each_kind_without_its_field_names_step_task_and_field(kind: str) -> None:
    found = errors_of(f"""
        workflow:
          - step: start
            tool:
              - load: {{kind: noop}}
              - fetch: {{kind: {kind}}}
    """)
    field = REQUIRED[kind][0][0]
    assert len(found) == 1, found
    assert found[0].startswith(f'test.yaml:9: step "start" field "tool.fetch.{field}": '
                               f'{kind} task "fetch" needs `{field}:`'), found


@pytest.mark.parametrize(("kind", "body"), [
    ("postgres", "query: select 1"), ("postgres", "commands: ['select 1', 'select 2']"),
    ("duckdb", "command: select 1"), ("shell", "cmds: [echo hi]"), ("shell", "command: [ls, -l]"),
    ("nats", "{operation: kv_get, bucket: b, key: k}"), ("secrets", "name: api_key"),
    ("http", "endpoint: http://localhost/x"), ("playbook", "path: ./child.yaml"),
])
def test_each_spelling_the_tool_reads_satisfies_the_check(kind: str, body: str) -> None:
    fields = body.strip("{}")
    parse_playbook(playbook_text(f"""
        workflow:
          - step: start
            tool: {{kind: {kind}, {fields}}}
    """), FILE)


def test_an_empty_command_is_as_missing_as_no_command() -> None:
    assert errors_of("""
        workflow:
          - step: start
            tool: {kind: shell, command: ""}
    """) == ['test.yaml:7: step "start" field "tool.command": shell task needs `command:` '
             "(or `cmds:`)"]
