"""`sink` (spec 004 §10, spec 000 §3) compiles to storage tasks of the canonical IR, field by
field: the step-level clause to tasks after the pipeline, the case action to `Rule.sink`."""

from __future__ import annotations

import pytest
from unit_helpers import parse, playbook_text

from noetl_stream.dsl import parse_playbook
from noetl_stream.dsl.models import SinkSpec, Task
from noetl_stream.errors import PlaybookError


def issues_of(body: str) -> list[str]:
    with pytest.raises(PlaybookError) as caught:
        parse_playbook(playbook_text(body), "test.yaml")
    return [str(i) for i in caught.value.issues if i.severity == "error"]


def test_step_sink_with_table_compiles_to_an_insert_task_after_the_pipeline() -> None:
    step = parse("""
        workflow:
          - step: start
            tool: {kind: python, code: "result = {'id': 1}"}
            sink:
              tool: {kind: postgres, auth: pg}
              table: public.items
              args: {id: "{{ result.id }}", body: "{{ data }}"}
              when: "{{ result.id > 0 }}"
    """).step("start")
    main, sink = step.tasks
    assert main.name == "start_task" and main.sink is None
    assert sink == Task(
        name="start_sink", kind="postgres", line=sink.line,
        config={"auth": "pg", "command": "INSERT INTO public.items (id, body) VALUES (:id, :body)",
                "params": {"id": "{{ result.id }}", "body": "{{ data }}"}},
        spec=sink.spec, sink=SinkSpec(when="{{ result.id > 0 }}", source="sink"))


def test_step_sink_shorthand_upsert_on_duckdb_uses_dollar_parameters() -> None:
    (_, sink) = parse("""
        workflow:
          - step: start
            tool: {kind: noop}
            sink: {kind: duckdb, table: t, mode: upsert, key: id,
                   args: {id: "{{ result.id }}", n: "{{ result.n }}"}}
    """).step("start").tasks
    assert sink.kind == "duckdb"
    assert sink.config["command"] == ("INSERT INTO t (id, n) VALUES ($id, $n) "
                                      "ON CONFLICT (id) DO UPDATE SET n = excluded.n")
    assert sink.sink == SinkSpec(when=None, source="sink")


def test_step_sink_without_table_keeps_the_tools_command_and_args_become_inputs() -> None:
    (_, sink) = parse("""
        workflow:
          - step: start
            tool: {kind: noop}
            sink:
              tool:
                kind: duckdb
                command: "CREATE TABLE IF NOT EXISTS t AS SELECT 1 AS x"
              args: {rows: "{{ result }}"}
    """).step("start").tasks
    assert sink.config == {"command": "CREATE TABLE IF NOT EXISTS t AS SELECT 1 AS x"}
    assert sink.input == {"rows": "{{ result }}"}


def test_a_list_of_step_sinks_runs_in_order_and_breaks_jump_to_the_first() -> None:
    step = parse("""
        workflow:
          - step: start
            tool:
              kind: noop
              spec:
                policy:
                  rules:
                    - when: "{{ true }}"
                      then: {do: break}
            sink:
              - {kind: duckdb, command: "SELECT 1"}
              - {kind: postgres, command: "SELECT 2"}
    """).step("start")
    assert [t.name for t in step.tasks] == ["start_task", "start_sink_0", "start_sink_1"]
    assert [t.sink.source for t in step.tasks[1:] if t.sink] == ["sink[0]", "sink[1]"]
    (rule,) = step.tasks[0].rules
    assert (rule.do, rule.to) == ("jump", "start_sink_0")


def test_case_sink_action_compiles_to_rule_attached_tasks() -> None:
    step = parse("""
        workflow:
          - step: start
            tool: {kind: python, code: "result = [1, 2]"}
            case:
              - when: "{{ event.name == 'call.done' and result | length > 1 }}"
                then:
                  sink:
                    tool: {kind: duckdb, db_path: /tmp/x.duckdb}
                    table: t
                    args: {n: "{{ result | length }}"}
                  next: [end]
    """).step("start")
    (task,) = step.tasks
    (rule,) = task.rules
    assert (rule.event, rule.do, rule.route) == ("call.done", "break", "case[0]")
    (sink,) = rule.sink
    assert sink.name == "start_case0_sink"
    assert sink.config == {"db_path": "/tmp/x.duckdb", "command": "INSERT INTO t (n) VALUES ($n)",
                           "params": {"n": "{{ result | length }}"}}
    assert sink.sink == SinkSpec(when=None, source="case[0].then.sink")


def test_case_sink_on_step_exit_and_with_retry_are_errors() -> None:
    issues = issues_of("""
        workflow:
          - step: start
            tool: {kind: noop}
            case:
              - when: "{{ event.name == 'step.exit' }}"
                then:
                  sink: {kind: duckdb, command: "SELECT 1"}
              - when: "{{ event.name == 'call.error' }}"
                then:
                  sink: {kind: duckdb, command: "SELECT 1"}
                  retry: {max_attempts: 2}
    """)
    assert any('field "case[0].then.sink"' in i and '"sink" does nothing on step.exit' in i
               for i in issues)
    assert any("`sink` and `retry` in one rule" in i for i in issues)


@pytest.mark.parametrize(("sink", "field", "message"), [
    ("{table: t}", "sink", "a sink needs a tool"),
    ("{kind: http, url: 'http://x', table: t, args: {a: 1}}", "sink.table",
     "`table` is for the postgres and duckdb kinds"),
    ("{kind: postgres, table: t}", "sink.args", "needs `args`"),
    ("{kind: postgres, table: 'bad name', args: {a: 1}}", "sink.table", "is not a name"),
    ("{kind: postgres, table: t, mode: merge, args: {a: 1}}", "sink.mode",
     'sink mode "merge" is not one of insert, upsert'),
    ("{kind: postgres, table: t, mode: upsert, args: {a: 1}}", "sink.key", "needs `key`"),
    ("{kind: postgres, mode: upsert, command: x}", "sink", "`mode` needs `table`"),
    ("{tool: {kind: postgres, command: x}, tabel: t}", "sink.tabel", 'did you mean "table"?'),
    ("{kind: postgress, command: x}", "tool.kind", 'did you mean "postgres"?'),
])
def test_step_sink_errors_name_the_field(sink: str, field: str, message: str) -> None:
    (issue,) = issues_of(f"""
        workflow:
          - step: start
            tool: {{kind: noop}}
            sink: {sink}
    """)
    assert f'test.yaml:8: step "start" field "{field}"' in issue
    assert message in issue


def test_sink_args_beside_a_tool_whose_args_are_not_a_mapping_name_the_tools_field() -> None:
    (issue,) = issues_of("""
        workflow:
          - step: start
            tool: {kind: noop}
            sink: {tool: {kind: duckdb, command: x, args: [1]}, args: {a: 1}}
    """)
    assert 'step "start" field "tool.args": must be a mapping' in issue


def test_sink_on_a_listener_is_an_error() -> None:
    issues = issues_of("""
        workflow:
          - step: start
            eval_mode: on_event
            sink: {kind: duckdb, command: "SELECT 1"}
            case:
              - when: "{{ event.name == 'signal.go' }}"
                then:
                  sink: {kind: duckdb, command: "SELECT 1"}
                  next: [end]
    """)
    assert any('field "sink"' in i and "nothing to sink" in i for i in issues)
    assert any('"sink" does nothing in an `eval_mode: on_event` step' in i for i in issues)
