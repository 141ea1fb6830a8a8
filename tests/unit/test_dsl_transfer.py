"""The `transfer` kind's settings: validation naming file, line, step and field, and the pure
parts of the tool (rows of an HTTP body, columns from a mapping, the statements it writes with).
"""

from __future__ import annotations

import pytest
from unit_helpers import FILE, parse, playbook_text

from noetl_stream.dsl import parse_playbook
from noetl_stream.dsl.transfer import problems, read_plan
from noetl_stream.errors import PlaybookError
from noetl_stream.tools import transfer as tool


def step_with(task: str) -> str:
    return "workflow:\n  - step: start\n    tool:\n      kind: transfer\n" + task


GOOD = """\
      source: {type: http, url: "http://x/posts"}
      target:
        type: postgres
        auth: pg_local
        table: public.t
        mapping: {post_id: id, user_id: userId}
"""


def errors(task: str) -> list[str]:
    with pytest.raises(PlaybookError) as caught:
        parse_playbook(playbook_text(step_with(task)), FILE)
    return [str(i) for i in caught.value.issues if i.severity == "error"]


def test_a_complete_transfer_parses_with_its_settings_in_the_config() -> None:
    task = parse(step_with(GOOD)).step("start").tasks[0]

    assert task.kind == "transfer"
    assert task.config["target"]["mapping"] == {"post_id": "id", "user_id": "userId"}


def test_a_source_type_noetl_has_but_this_build_does_not_names_the_line_and_field() -> None:
    found = errors(GOOD.replace("type: http,", "type: snowflake,"))

    assert found == ['test.yaml:9: step "start" field "tool.source.type": transfer source type '
                     '"snowflake" is not available in this version of noetl-stream; source types '
                     "here are http, postgres, duckdb"]


def test_an_unknown_target_type_is_an_error_on_its_line() -> None:
    found = errors(GOOD.replace("type: postgres", "type: gcs"))

    assert found == ['test.yaml:11: step "start" field "tool.target.type": transfer target type '
                     '"gcs" is not one of postgres, duckdb']


def test_required_fields_are_named() -> None:
    found = errors("""\
      source: {type: postgres}
      target: {type: duckdb}
      mode: merge
      chunk_size: 0
""")

    assert [f.split('": ', 1)[0] for f in found] == [
        'test.yaml:9: step "start" field "tool.source.query',
        'test.yaml:9: step "start" field "tool.source.auth',
        'test.yaml:10: step "start" field "tool.target.table',
        'test.yaml:11: step "start" field "tool.mode',
        'test.yaml:12: step "start" field "tool.chunk_size']


def test_an_unknown_field_inside_the_source_is_an_error() -> None:
    found = errors(GOOD.replace('url: "http://x/posts"', 'url: "http://x", datapath: items'))

    assert len(found) == 1
    assert 'field "tool.source.datapath"' in found[0]


def test_a_mapping_that_is_not_column_to_field_is_an_error() -> None:
    found = errors(GOOD.replace("{post_id: id, user_id: userId}", "[id, userId]"))

    assert len(found) == 1
    assert 'field "tool.target.mapping"' in found[0]


def test_values_a_template_decides_are_checked_only_once_rendered() -> None:
    config = {"source": {"type": "{{ workload.kind }}", "url": "u"},
              "target": {"type": "postgres", "auth": "{{ pg }}", "table": "t"}}

    assert problems(config, rendered=False) == []
    assert [p.path for p in problems(config, rendered=True)] == [("source", "type")]


def test_the_plan_reads_older_names_and_defaults() -> None:
    plan = read_plan({"source": {"kind": "HTTP", "url": "u"},
                      "target": {"tool": "duckdb", "table": "t", "connection": "/tmp/x.duckdb"},
                      "mode": "insert"})

    assert (plan.source.type, plan.target.type, plan.mode, plan.chunk_size) == \
        ("http", "duckdb", "append", 1000)
    assert plan.target.get("db_path") == "/tmp/x.duckdb"


def test_rows_of_an_http_body_at_a_data_path() -> None:
    body = {"data": {"items": [{"id": 1}, {"id": 2}]}}

    assert tool.records_of(body, "data.items") == [{"id": 1}, {"id": 2}]
    assert tool.records_of({"id": 1}, None) == [{"id": 1}]
    with pytest.raises(ValueError, match='no "results"'):
        tool.records_of(body, "data.results")
    with pytest.raises(ValueError, match="row 1 of the response is int"):
        tool.records_of([{"id": 1}, 2], None)


def test_a_mapped_field_no_row_holds_is_refused_as_a_misspelling() -> None:
    rows = tool._Rows([{"id": 1, "userId": 2}, {"id": 2}], None)

    assert tool.columns_and_fields({"post_id": "id", "user_id": "userId"}, rows) == \
        (["post_id", "user_id"], ["id", "userId"])
    with pytest.raises(ValueError, match='no source row has a field "userid"'):
        tool.columns_and_fields({"user_id": "userid"}, rows)


def test_dotted_fields_read_nested_values() -> None:
    record = {"id": 1, "address": {"city": "Oslo"}, "a.b": "flat"}

    assert tool.field_value(record, "address.city") == "Oslo"
    assert tool.field_value(record, "a.b") == "flat"
    assert tool.field_value(record, "address.zip") is None


def test_upsert_updates_every_column_but_the_first_on_conflict() -> None:
    plan = read_plan({"source": {"type": "http", "url": "u"},
                      "target": {"type": "postgres", "auth": "a", "table": "public.t"},
                      "mode": "upsert"})

    setup, statement = tool.write_statements(plan, ["id", "name", "n"])

    assert setup == []
    assert statement == ('INSERT INTO public.t ("id", "name", "n") VALUES ($1, $2, $3) '
                         'ON CONFLICT ("id") DO UPDATE SET "name" = EXCLUDED."name", '
                         '"n" = EXCLUDED."n"')


def test_replace_empties_the_table_first_and_duckdb_takes_question_marks() -> None:
    plan = read_plan({"source": {"type": "postgres", "auth": "a", "query": "SELECT 1"},
                      "target": {"type": "duckdb", "table": "t"}, "mode": "replace"})

    assert tool.write_statements(plan, ["a", "b"]) == \
        (["DELETE FROM t"], 'INSERT INTO t ("a", "b") VALUES (?, ?)')
