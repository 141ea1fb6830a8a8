"""Fields the parser accepts that no tool would act on are reported: a warning naming file, line,
step and field, and an error under --strict. Every kind is covered."""

from __future__ import annotations

import pytest
from unit_helpers import FILE, playbook_text

from noetl_stream.dsl import parse_playbook
from noetl_stream.dsl.kinds import COMMON_TASK_KEYS, KIND_FIELDS, RUNNABLE_KINDS
from noetl_stream.dsl.support import NATS_OPERATION_FIELDS, UNSUPPORTED, ignored_fields
from noetl_stream.errors import PlaybookError
from noetl_stream.tools.nats import OPERATIONS

# (kind, the task's fields, the field reported): line 9 is the first field after `kind`.
CASES = [
    ("python", "module: pkg.mod\n      code: 'result = 1'", "tool.module", "calling an installed"),
    ("python", "function: run\n      code: 'result = 1'", "tool.function", "calling an installed"),
    ("python", "output: {store: {kind: kv}}\n      code: 'result = 1'", "tool.output",
     "NoETL's tool `output:`"),
    ("http", "url: http://a\n      endpoint: http://b", "tool.endpoint",
     '"endpoint" is ignored: "url" is given'),
    ("http", "json: {a: 1}\n      body: x\n      url: http://a", "tool.body",
     '"body" is ignored: "json" is given'),
    ("http", "verify: false\n      verify_ssl: true\n      url: http://a", "tool.verify_ssl",
     '"verify_ssl" is ignored: "verify" is given'),
    ("postgres", "command: SELECT 1\n      query: SELECT 2\n      auth: pg", "tool.query",
     '"query" is ignored: "command" is given'),
    ("postgres", "auth: pg\n      connection: postgresql://x\n      command: SELECT 1",
     "tool.connection", '"connection" is ignored: "auth" is given'),
    ("postgres", "credential: pg\n      connection: postgresql://x\n      command: SELECT 1",
     "tool.connection", '"connection" is ignored: "auth" is given'),
    ("duckdb", "command: SELECT 1\n      query: SELECT 2", "tool.query",
     '"query" is ignored: "command" is given'),
    ("playbook", "playbook_id: pb_1\n      path: ./c.yaml", "tool.playbook_id",
     "starting a child by catalog content key"),
    ("playbook", "catalog_id: 7\n      path: ./c.yaml", "tool.catalog_id", "NoETL catalog id"),
    ("nats", "subject: a.b\n      operation: kv_get\n      bucket: b\n      key: k", "tool.subject",
     'nats operation "kv_get" does not read "subject"'),
    ("nats", "data: x\n      operation: kv_put\n      bucket: b\n      key: k\n      value: v",
     "tool.data", 'nats operation "kv_put" does not read "data"'),
    ("nats", "value: v\n      data: x\n      operation: object_put\n      bucket: b\n      key: k",
     "tool.data", '"data" is ignored: "value" is given'),
    ("shell", "assert: {expects: [x]}\n      command: 'true'", "tool.assert",
     "NoETL's `assert: {expects, returns}` checks"),
    ("secrets", "outcome: {}\n      name: x", "tool.outcome", "a task-level `outcome:` block"),
    ("noop", "output: {as: x}", "tool.output", "NoETL's tool `output:`"),
    ("http", "output_select: {strategy: size_threshold}\n      url: http://a",
     "tool.output_select", "NoETL's `output_select`"),
]


def task_playbook(kind: str, fields: str) -> str:
    body = f"workflow:\n  - step: start\n    tool:\n      kind: {kind}\n      {fields}\n"
    return playbook_text(body)


@pytest.mark.parametrize(("kind", "fields", "field", "text"), CASES,
                         ids=[f"{c[0]}-{c[2]}" for c in CASES])
def test_field_without_effect_is_a_warning_naming_file_line_step_and_field(
        kind: str, fields: str, field: str, text: str) -> None:
    playbook = task_playbook(kind, fields)
    line = 9 + next(i for i, f in enumerate(fields.split("\n")) if f.strip().startswith(
        field.removeprefix("tool.") + ":"))

    result = parse_playbook(playbook, FILE, strict=False)

    (warning,) = [str(w) for w in result.warnings]
    assert warning.startswith(f'{FILE}:{line}: step "start" field "{field}": warning: ')
    assert text in warning


@pytest.mark.parametrize(("kind", "fields", "field", "text"), CASES[:3] + CASES[12:14],
                         ids=[f"{c[0]}-{c[2]}" for c in CASES[:3] + CASES[12:14]])
def test_field_without_effect_is_an_error_under_strict(kind: str, fields: str, field: str,
                                                       text: str) -> None:
    with pytest.raises(PlaybookError) as caught:
        parse_playbook(task_playbook(kind, fields), FILE, strict=True)

    (error,) = [i for i in caught.value.issues if i.severity == "error"]
    assert error.field == field and error.step == "start"
    assert text in error.message


def test_step_level_output_is_reported_too() -> None:
    result = parse_playbook(playbook_text("""
        workflow:
          - step: start
            output: {as: x}
    """), FILE)

    assert [str(w) for w in result.warnings] == [
        'test.yaml:7: step "start" field "output": warning: a step-level `output:` block is not '
        "supported by this version of noetl-stream; the field has no effect"]


def test_fields_a_tool_reads_raise_no_warning() -> None:
    result = parse_playbook(playbook_text("""
        workflow:
          - step: start
            tool:
              kind: nats
              operation: js_publish
              subject: a.b
              data: {x: 1}
              stream: S
    """), FILE, strict=True)

    assert result.warnings == []


def test_templated_nats_operation_is_checked_only_when_rendered() -> None:
    assert ignored_fields("nats", {"operation": "{{ workload.op }}", "value": 1, "seq": 2}) == []


def test_every_nats_operation_has_its_fields_listed() -> None:
    assert set(NATS_OPERATION_FIELDS) == set(OPERATIONS)


def test_unsupported_fields_are_fields_the_parser_accepts() -> None:
    for kind, fields in UNSUPPORTED.items():
        accepted = COMMON_TASK_KEYS if kind == "*" else KIND_FIELDS[kind]
        assert set(fields) <= accepted, kind
    assert set(UNSUPPORTED) - {"*"} <= RUNNABLE_KINDS
