"""NoETL's spellings of task fields, read into the fields the tools here take."""

from __future__ import annotations

from typing import Any

import pytest
from unit_helpers import FILE, parse, playbook_text

from noetl_stream.dsl import parse_playbook
from noetl_stream.errors import PlaybookError


def task_config(kind: str, fields: str) -> dict[str, object]:
    body = f"workflow:\n  - step: start\n    tool:\n      kind: {kind}\n      {fields}\n"
    (task,) = parse(body, strict=True).steps[0].tasks
    return dict(task.config)


def task_errors(kind: str, fields: str) -> list[str]:
    body = f"workflow:\n  - step: start\n    tool:\n      kind: {kind}\n      {fields}\n"
    with pytest.raises(PlaybookError) as caught:
        parse_playbook(playbook_text(body), FILE, strict=False)
    return [f"{i.field}: {i.message}" for i in caught.value.issues if i.severity == "error"]


def test_postgres_flat_fields_of_the_rust_tool_are_one_connection_mapping() -> None:
    config = task_config("postgres", "host: db\n      port: 6543\n      user: app\n"
                                     "      password: '{{ ctx.pw }}'\n      database: sales\n"
                                     "      command: SELECT 1")
    assert config["connection"] == {"host": "db", "port": 6543, "user": "app",
                                    "password": "{{ ctx.pw }}", "database": "sales"}
    assert not {"host", "port", "user", "password", "database"} & config.keys()


def test_postgres_db_fields_of_the_python_tool_are_one_connection_mapping() -> None:
    config = task_config("postgres", "db_host: db\n      db_port: 5432\n      db_user: app\n"
                                     "      db_password: pw\n      db_name: sales\n"
                                     "      command: SELECT 1")
    assert config["connection"] == {"host": "db", "port": 5432, "user": "app", "password": "pw",
                                    "database": "sales"}


@pytest.mark.parametrize("field", ["connection_string", "db_conn_string"])
def test_postgres_connection_string_is_the_connection(field: str) -> None:
    config = task_config("postgres", f"{field}: postgresql://a@b/c\n      command: SELECT 1")
    assert config["connection"] == "postgresql://a@b/c" and field not in config


def test_postgres_connection_fields_beside_auth_are_an_error_naming_both() -> None:
    (error,) = task_errors("postgres", "auth: pg\n      host: db\n      command: SELECT 1")
    assert error.startswith("tool.host: ") and "`auth:`" in error


def test_postgres_one_setting_under_both_names_with_different_values_is_an_error() -> None:
    (error,) = task_errors("postgres", "host: a\n      db_host: b\n      command: SELECT 1")
    assert error.startswith("tool.db_host: ") and '"db_host" and "host"' in error


@pytest.mark.parametrize("kind, fields", [("python", "code: 'result = 1'"),
                                          ("shell", "command: 'true'"),
                                          ("http", "url: http://x")])
def test_timeout_seconds_is_the_timeout(kind: str, fields: str) -> None:
    config = task_config(kind, f"timeout_seconds: 7\n      {fields}")
    assert config["timeout"] == 7 and "timeout_seconds" not in config


def test_duckdb_db_of_noetls_cli_is_the_database_file() -> None:
    config = task_config("duckdb", "db: /tmp/x.duckdb\n      query: SELECT 1")
    assert config["db_path"] == "/tmp/x.duckdb" and "db" not in config


@pytest.mark.parametrize("written, seconds", [("30s", 30.0), ("5m", 300.0), ("1h", 3600.0),
                                              ("500ms", 0.5), ("1.5m", 90.0), ("1d", 86400.0)])
def test_step_spec_timeout_as_a_duration_is_every_tasks_timeout_in_seconds(
        written: str, seconds: float) -> None:
    body = f"workflow:\n  - step: start\n    spec: {{timeout: '{written}'}}\n" \
           "    tool:\n      - a: {kind: python, code: 'result = 1'}\n" \
           "      - b: {kind: shell, command: 'true', spec: {timeout: 2m}}\n"
    a, b = parse(body, strict=True).steps[0].tasks
    assert a.spec["timeout"] == seconds and b.spec["timeout"] == 120.0


def test_step_spec_timeout_duration_sets_the_watchdog_budget() -> None:
    from noetl_stream.router.budgets import step_timeout_s

    playbook = parse("workflow:\n  - step: start\n    spec: {timeout: 2m}\n    tool: {kind: noop}\n")
    assert step_timeout_s(playbook, playbook.steps[0]) == 120.0


def test_a_timeout_that_is_no_duration_is_an_error_saying_what_is_accepted() -> None:
    body = "workflow:\n  - step: start\n    spec: {timeout: soon}\n    tool: {kind: noop}\n"
    with pytest.raises(PlaybookError, match=r"positive number of seconds or a duration \(30s"):
        parse_playbook(playbook_text(body), FILE, strict=False)


TWO_TARGETS = """workflow:
  - step: start
    spec: {next_mode: MODE}
    tool: {kind: noop}
    next: NEXT
  - step: a
  - step: b
"""


@pytest.mark.parametrize("mode", ["exclusive", "inclusive"])
@pytest.mark.parametrize("nxt", ["[{step: a, when: '{{ true }}'}, {step: b}]",
                                 "{arcs: [{step: a, when: '{{ true }}'}, {step: b}]}"])
def test_step_spec_next_mode_is_the_mode_of_targets_and_of_arcs_without_their_own(
        mode: str, nxt: str) -> None:
    playbook = parse(TWO_TARGETS.replace("MODE", mode).replace("NEXT", nxt), strict=True)
    assert playbook.steps[0].next.mode == mode


def test_next_spec_mode_wins_over_step_next_mode_and_bare_names_all_fire() -> None:
    router = parse(TWO_TARGETS.replace("MODE", "inclusive").replace(
        "NEXT", "{spec: {mode: exclusive}, arcs: [{step: a}, {step: b}]}"), strict=True)
    names = parse(TWO_TARGETS.replace("MODE", "exclusive").replace("NEXT", "[a, b]"), strict=True)
    assert router.steps[0].next.mode == "exclusive" and names.steps[0].next.mode == "inclusive"


def test_next_mode_that_is_neither_mode_is_an_error_naming_the_field() -> None:
    text = playbook_text(TWO_TARGETS.replace("MODE", "first").replace("NEXT", "[a, b]"))
    with pytest.raises(PlaybookError) as caught:
        parse_playbook(text, FILE)
    (issue,) = caught.value.issues
    assert issue.field == "spec.next_mode" and 'next_mode "first"' in issue.message


def test_arc_spec_placeholder_is_accepted_and_changes_nothing() -> None:
    body = "workflow:\n  - step: start\n    next: {arcs: [{step: b, spec: {note: x}}]}\n  - step: b\n"
    (arc,) = parse(body, strict=True).steps[0].next.arcs
    assert arc.step == "b" and arc.when is None


def test_frame_verify_ipc_is_reported_with_the_frame_knobs_not_used() -> None:
    body = ("workflow:\n  - step: start\n    loop:\n      iterator: row\n"
            "      cursor: {kind: postgres, auth: pg, claim: 'SELECT 1'}\n"
            "      spec: {mode: cursor, frame: {verify_ipc: true}}\n")
    result = parse_playbook(playbook_text(body), FILE, strict=False)
    (warning,) = [str(w) for w in result.warnings]
    assert "frame verify_ipc not used" in warning


ENTRY = """executor:
  spec: {entry_step: load}
workflow:
  - step: start
  - step: load
    next: start
"""


def test_executor_entry_step_is_where_the_execution_starts() -> None:
    assert parse(ENTRY, strict=True).start_step.name == "load"


def test_executor_entry_step_naming_no_step_is_an_error() -> None:
    with pytest.raises(PlaybookError) as caught:
        parse_playbook(playbook_text(ENTRY.replace("entry_step: load", "entry_step: lod")), FILE)
    (issue,) = caught.value.issues
    assert issue.field == "executor.spec.entry_step" and '"lod" names no step' in issue.message


def test_executor_final_step_is_refused_saying_to_name_the_step_end() -> None:
    text = playbook_text(ENTRY.replace("entry_step: load", "final_step: load"))
    with pytest.raises(PlaybookError) as caught:
        parse_playbook(text, FILE)
    (issue,) = caught.value.issues
    assert issue.field == "executor.spec.final_step"
    assert issue.message.startswith("NoETL form not run here: executor.spec.final_step")
    assert "name that step `end`" in issue.message


def test_executor_requires_tools_names_the_kinds_this_runtime_does_not_run() -> None:
    text = playbook_text("executor:\n  requires: {tools: [http, snowflake]}\n"
                         "workflow:\n  - step: start\n")
    with pytest.raises(PlaybookError) as caught:
        parse_playbook(text, FILE)
    (issue,) = caught.value.issues
    assert issue.field == "executor.requires.tools" and '"snowflake"' in issue.message


def test_keychain_type_map_and_ref_spellings_of_noetls_keychain() -> None:
    body = ("keychain:\n  - {name: cfg, type: static, map: {region: eu, retries: 3}}\n"
            "  - {name: pg, kind: credential_ref, ref: pg_local}\n"
            "workflow:\n  - step: start\n")
    cfg, pg = parse(body, strict=True).keychain
    assert (cfg.kind, cfg.config) == ("static", {"region": "eu", "retries": 3})
    assert (pg.kind, pg.config) == ("credential", {"credential": "pg_local"})


@pytest.mark.parametrize("kind", ["secret_manager", "secrets", "google_id_token", "google_oauth"])
def test_noetl_keychain_kinds_not_run_here_are_refused_saying_what_to_write(kind: str) -> None:
    text = playbook_text(f"keychain:\n  - {{name: s, kind: {kind}}}\nworkflow:\n  - step: start\n")
    with pytest.raises(PlaybookError) as caught:
        parse_playbook(text, FILE)
    (issue,) = caught.value.issues
    assert issue.message.startswith(f'NoETL form not run here: keychain kind "{kind}"; instead, ')


def test_keychain_entry_of_noetls_server_form_without_a_kind_says_what_to_write() -> None:
    text = playbook_text("keychain:\n  - {name: t, credential: c, token_type: bearer}\n"
                         "workflow:\n  - step: start\n")
    with pytest.raises(PlaybookError) as caught:
        parse_playbook(text, FILE)
    (issue,) = caught.value.issues
    assert "server form without one" in issue.message
    assert "write `kind: credential` with `credential: NAME`" in issue.message


def test_step_server_url_worker_id_and_command_id_are_no_template_globals_here() -> None:
    from noetl_stream.dsl.context import build_context
    from noetl_stream.dsl.templating import render_string

    bare = build_context(workload={}, ctx={}, execution_id="e1")
    named = build_context(workload={"step": "from-workload"}, ctx={}, execution_id="e1")
    assert [render_string("{{ " + name + " }}", bare)
            for name in ("step", "server_url", "worker_id", "command_id")] == [None] * 4
    assert render_string("{{ step }}", named) == "from-workload"


ROUTED = """workflow:
  - step: start
    spec: {next_mode: MODE}
    next: [{step: small, when: "{{ result.n < 10 }}"}, {step: other}]
  - step: small
  - step: other
"""


@pytest.mark.parametrize(("mode", "fired"), [("exclusive", ["start", "small"]),
                                             ("inclusive", ["start", "small", "other"])])
def test_router_follows_the_step_next_mode_over_a_list_of_targets(mode: str,
                                                                   fired: list[str]) -> None:
    from noetl_stream.testing import Reply, RouterHarness

    harness = RouterHarness(parse(ROUTED.replace("MODE", mode)))
    harness.run(lambda c: Reply(result={"n": 4}))
    assert harness.fired_steps() == fired and harness.state.status == "completed"


@pytest.mark.parametrize("on_no_match", ["complete", "quiet"])
def test_router_no_matching_arc_ends_the_branch_and_the_execution_completes(
        on_no_match: str) -> None:
    from noetl_stream.testing import Reply, RouterHarness

    harness = RouterHarness(parse(f"""workflow:
  - step: start
    next:
      spec: {{mode: exclusive, on_no_match: {on_no_match}}}
      arcs: [{{step: b, when: "{{{{ result.n > 10 }}}}"}}]
  - step: b
"""))
    harness.run(lambda c: Reply(result={"n": 4}))
    assert harness.fired_steps() == ["start"] and harness.state.status == "completed"


def test_retry_on_error_kinds_status_list_and_number_backoff_of_noetls_playbooks() -> None:
    body = ("workflow:\n  - step: start\n    tool:\n      kind: http\n      url: http://x\n"
            "      retry: {max_attempts: 2, retry_on: [timeout, connection_error],"
            " retry_on_status: [503], backoff: 5}\n")
    (rule,) = parse(body, strict=True).steps[0].tasks[0].rules
    assert rule.do == "retry" and rule.attempts == 2
    assert (rule.backoff, rule.delay) == ("fixed", 5.0)
    assert rule.when == ("{{ not success and ((error.kind if error else none) in "
                         "['connection', 'connection_error', 'timeout'] or status_code in [503]) }}")


@pytest.mark.parametrize("kind, auth", [("duckdb", ""), ("postgres", "\n      auth: pg")])
def test_commands_as_text_or_a_list_is_the_command(kind: str, auth: str) -> None:
    as_text = task_config(kind, f"commands: 'SELECT 1; SELECT 2'{auth}")
    as_list = task_config(kind, f"commands: ['CREATE TABLE t (a int)', 'SELECT * FROM t;']{auth}")
    assert as_text["command"] == "SELECT 1; SELECT 2" and "commands" not in as_text
    assert as_list["command"] == "CREATE TABLE t (a int);\nSELECT * FROM t;"


def test_playbook_timeout_is_the_tasks_timeout_bounding_the_wait_for_the_child() -> None:
    body = ("workflow:\n  - step: start\n    tool:\n      kind: playbook\n"
            "      path: ./child.yaml\n      timeout: 90\n")
    (task,) = parse(body, strict=True).steps[0].tasks
    assert task.spec["timeout"] == 90 and "timeout" not in task.config


def test_else_with_then_beside_it_is_the_else_rule() -> None:
    body = ("workflow:\n  - step: start\n    tool:\n      kind: noop\n      spec:\n"
            "        policy:\n          rules:\n            - else:\n              then: {do: fail}\n")
    (rule,) = parse(body, strict=True).steps[0].tasks[0].rules
    assert rule.when is None and rule.do == "fail"


def test_keychain_credential_scope_is_its_cache_and_auto_renew_is_accepted() -> None:
    body = ("keychain:\n  - {name: pg, kind: credential, credential: pg_local, scope: global,"
            " auto_renew: true}\n  - {name: api, kind: bearer, token: t, auto_renew: true}\n"
            "workflow:\n  - step: start\n")
    pg, api = parse(body, strict=True).keychain
    assert pg.config == {"credential": "pg_local", "cache": "global"}
    assert api.config == {"token": "t"}


OAUTH2_PY = """keychain:
  - name: tok
    kind: oauth2
    scope: global
    endpoint: "{{ workload.api }}/oauth2/token"
    method: POST
    headers: {Content-Type: application/x-www-form-urlencoded}
    data: {grant_type: client_credentials, client_id: app, client_secret: "{{ workload.s }}"DATA}
workflow:
  - step: start
"""


def test_keychain_oauth2_of_noetls_python_form_is_a_client_credentials_entry() -> None:
    (entry,) = parse(OAUTH2_PY.replace("DATA", ", scope: read"), strict=True).keychain
    assert entry.config == {"token_url": "{{ workload.api }}/oauth2/token", "auth_method": "post",
                            "client_id": "app", "client_secret": "{{ workload.s }}",
                            "scope": "read", "cache": "global"}


def test_keychain_oauth2_python_form_with_other_data_is_refused_saying_what_to_write() -> None:
    text = playbook_text(OAUTH2_PY.replace("DATA", ", username: u"))
    with pytest.raises(PlaybookError) as caught:
        parse_playbook(text, FILE)
    (issue,) = caught.value.issues
    assert issue.field == "keychain[0].endpoint"
    assert "NoETL form not run here: an oauth2 entry that POSTs any `data`" in issue.message


def test_keychain_oauth2_python_form_with_headers_not_a_mapping_is_refused_saying_what_to_write(
) -> None:
    text = playbook_text(OAUTH2_PY.replace("headers: {Content-Type: application/x-www-form-"
                                           "urlencoded}", "headers: [Content-Type]")
                         .replace("DATA", ""))
    with pytest.raises(PlaybookError) as caught:
        parse_playbook(text, FILE)
    (issue,) = caught.value.issues
    assert issue.field == "keychain[0].endpoint"
    assert "NoETL form not run here: an oauth2 entry that POSTs any `data`" in issue.message


def test_retry_backoff_seconds_is_the_first_wait() -> None:
    body = ("workflow:\n  - step: start\n    tool:\n      kind: http\n      url: http://x\n"
            "      retry: {max_attempts: 3, backoff_seconds: 2}\n")
    (rule,) = parse(body, strict=True).steps[0].tasks[0].rules
    assert (rule.backoff, rule.delay) == ("fixed", 2.0)


def test_postgres_pool_sizing_is_a_warning_that_it_has_no_effect() -> None:
    body = ("workflow:\n  - step: start\n    tool:\n      kind: postgres\n      auth: pg\n"
            "      pool: {max_size: 4}\n      command: SELECT 1\n")
    result = parse_playbook(playbook_text(body), FILE, strict=False)
    (warning,) = [str(w) for w in result.warnings]
    assert 'field "tool.pool"' in warning and "NoETL's postgres `pool:` sizing" in warning


def test_a_workbook_entrys_sink_is_reported_as_having_no_effect() -> None:
    body = ("workbook:\n  - name: w\n    tool: {kind: noop}\n    sink: {table: t}\n"
            "workflow:\n  - step: start\n    tool: {kind: workbook, name: w}\n")
    result = parse_playbook(playbook_text(body), FILE, strict=False)
    (warning,) = [str(w) for w in result.warnings]
    assert 'field "workbook[0].sink"' in warning and "put the sink on the step" in warning


CLI_CASE = """workflow:
  - step: start
    tool: {kind: noop}
    case:
      - when: "{{ result.go }}"
        then: [{step: b}]ELSE
  - step: b
  - step: c
"""


@pytest.mark.parametrize(("go", "fired"), [("true", ["start", "b"]), ("false", ["start"])])
async def test_a_case_then_list_of_steps_of_noetls_cli_goes_to_those_steps(
        go: str, fired: list[str]) -> None:
    from test_router_spec001 import drive

    harness, _, state = await drive(CLI_CASE.replace("ELSE", "").replace("result.go", go))
    assert harness.fired_steps() == fired and state.status == "completed"


def test_else_inside_a_case_entry_of_noetls_cli_is_refused_saying_to_write_its_own_entry() -> None:
    text = playbook_text(CLI_CASE.replace("ELSE", "\n        else: [{step: c}]"))
    with pytest.raises(PlaybookError) as caught:
        parse_playbook(text, FILE)
    (issue,) = caught.value.issues
    assert issue.field == "case[0].else" and "its own last entry" in issue.message


BARE = """workflow:
  - step: start
    next: {arcs: [{step: big, when: "result.n > 5"}, {step: other}]}
  - step: big
  - step: other
    when: "workload.go"
"""


@pytest.mark.parametrize(("n", "go", "statuses"), [
    (9, True, {"big": "completed", "other": "skipped"}),
    (1, True, {"big": "skipped", "other": "completed"}),
    (1, False, {"big": "skipped", "other": "skipped"})])
def test_guards_written_without_braces_are_expressions(n: int, go: bool,
                                                       statuses: dict[str, str]) -> None:
    from noetl_stream.testing import Reply, RouterHarness

    harness = RouterHarness(parse(BARE, strict=True), workload={"go": go})
    harness.run(lambda c: Reply(result={"n": n}))
    assert {k: v.status for k, v in harness.state.steps.items() if k != "start"} == statuses


def test_a_guard_without_braces_that_does_not_parse_is_an_error_naming_the_field() -> None:
    text = playbook_text(BARE.replace("result.n > 5", "result.n >"))
    with pytest.raises(PlaybookError) as caught:
        parse_playbook(text, FILE)
    (issue,) = caught.value.issues
    assert issue.field == "next.arcs[0]" and "does not parse" in issue.message


@pytest.mark.parametrize(("items", "iterations"), [
    ("'a, b,c'", ["a", "b", "c"]),
    ("'[1, 2]'", [1, 2]),
    ("3", [0, 1, 2]),
])
def test_loop_in_text_and_a_number_iterate_as_in_noetls_server(items: str,
                                                               iterations: list[Any]) -> None:
    from test_router_loops import loop_playbook, to_plain

    from noetl_stream.testing import RouterHarness

    harness = RouterHarness(loop_playbook("sequential", items=items))
    harness.run()
    assert [to_plain(c["context"]["iter"]["item"]) for c in harness.commands_for("each")] == \
        iterations


def test_loop_in_that_gives_null_fails_the_step_saying_how_to_mean_no_items() -> None:
    from test_router_loops import loop_playbook

    from noetl_stream.testing import RouterHarness

    harness = RouterHarness(loop_playbook("sequential", items="null"))
    harness.run()
    assert harness.state.status == "failed" and harness.state.error is not None
    assert "loop.in gave null" in harness.state.error["message"]
    assert "`| default([])`" in harness.state.error["message"]


def test_keychain_scope_of_a_static_map_or_a_bearer_entry_is_accepted_and_changes_nothing() -> None:
    body = ("keychain:\n  - {name: app, kind: static, scope: global, map: {client_id: c1}}\n"
            "  - {name: api, kind: bearer, scope: execution, token: t}\n"
            "workflow:\n  - step: start\n")
    app, api = parse(body, strict=True).keychain
    assert app.config == {"client_id": "c1"}
    assert api.config == {"token": "t"}


def test_an_http_auth_map_of_one_stored_credential_reads_as_the_inline_form() -> None:
    # NoETL's Python engine: {alias: {type, key}} names a stored credential by `key`.
    config = task_config("http", "url: http://a\n      auth: {api: {type: bearer, key: api_token}}")
    assert config["auth"] == {"type": "bearer", "credential": "api_token"}


def test_an_http_auth_map_from_a_secret_manager_or_of_several_aliases_is_refused() -> None:
    secret = task_errors("http", "url: http://a\n      auth: {ai: {type: bearer, "
                                 "provider: secret_manager, key: projects/p/secrets/k}}")
    several = task_errors("http", "url: http://a\n      auth: {a: {type: bearer, key: x}, "
                                  "b: {type: basic, key: y}}")
    assert secret == ['tool.auth: NoETL form not run here: http `auth:` alias "ai" from provider '
                      '"secret_manager" (NoETL\'s Python engine\'s auth map); instead, store the '
                      "secret as a credential (`noetl-stream credential set NAME ...`) and name "
                      "it: `auth: NAME`"]
    assert len(several) == 1 and "several aliases" in several[0]
