"""How stored results read in templates: NoETL's http envelope, its error kinds, per-statement
SQL keys, loop stats and `output` in router templates."""

from __future__ import annotations

from typing import Any

import pytest
from unit_helpers import parse

from noetl_stream.dsl import templating
from noetl_stream.dsl.values import ListView, LoopResults
from noetl_stream.dsl.views import http_view, output_view, sql_view, step_view
from noetl_stream.errors import TemplateError
from noetl_stream.testing import Reply, RouterHarness
from noetl_stream.tools.http import status_fields, status_kind
from noetl_stream.tools.postgres import script_payload

HTTP = {"status": 200, "headers": {"Content-Type": "application/json"}}


def read(expr: str, **names: Any) -> Any:
    return templating.render_string("{{ " + expr + " }}", names)


# -- http ------------------------------------------------------------------------------------------

def test_http_result_reads_as_the_python_engines_data_and_the_rust_tools_body() -> None:
    view = http_view({"items": [1, 2]}, HTTP)

    assert read("fetch.items", fetch=view) == [1, 2]
    assert read("fetch.data.items", fetch=view) == [1, 2]
    assert read("fetch.body.items", fetch=view) == [1, 2]
    assert read("fetch.status_code", fetch=view) == 200
    assert read("fetch.headers['Content-Type']", fetch=view) == "application/json"


def test_a_body_with_its_own_data_key_keeps_it_on_the_step_read() -> None:
    body = {"data": [{"id": 1}], "paging": {"next": None}}

    view = http_view(body, HTTP)

    assert view["data"] == [{"id": 1}]
    assert read("fetch.data", fetch=view) == [{"id": 1}]
    assert read("fetch.body.data", fetch=view) == [{"id": 1}]
    assert read("fetch.status_code", fetch=view) == 200


def test_output_data_data_is_the_body_even_when_the_body_has_its_own_data_key() -> None:
    body = {"data": [{"id": 1}], "paging": {"next": 2}, "meta": {"page": 1}}

    output = output_view(body, None, HTTP)

    assert read("output.data.data", output=output) == body
    assert read("output.data.data.paging.next", output=output) == 2
    assert read("output.data.data.data", output=output) == [{"id": 1}]
    assert read("output.data.meta", output=output) == {"page": 1}
    assert read("output.data.paging", output=output) == {"next": 2}
    assert read("output.data.status_code", output=output) == 200
    assert read("output.data.body", output=output) == body
    assert read("output.data.headers['Content-Type']", output=output) == "application/json"
    assert read("output.paging.next", output=output) == 2


def test_output_reads_the_body_as_output_data_data_with_status_code_and_headers() -> None:
    output = output_view({"n": 3}, None, HTTP)

    assert read("output.data.data", output=output) == {"n": 3}
    assert read("output.data.data.n", output=output) == 3
    assert read("output.n", output=output) == 3
    assert output["status"] == "ok"
    assert output["status_code"] == 200
    assert output["headers"] == HTTP["headers"]
    assert output["http"] == HTTP


def test_output_of_an_error_reply_has_its_status_code_and_kind() -> None:
    error = {"kind": "server_error", "status": 503, "retryable": True, "message": "HTTP 503"}
    output = output_view(None, error, {"status": 503, "headers": {}})

    assert output["status"] == "error"
    assert output["data"] is None
    assert output["status_code"] == 503
    assert read("output.error.kind == 'server_error'", output=output) is True


def test_an_own_status_code_key_wins_in_output_but_not_in_its_envelope() -> None:
    output = output_view({"status_code": "from-body"}, None, HTTP)

    assert output["status_code"] == "from-body"
    assert output["data"]["status_code"] == 200
    assert output["data"]["data"]["status_code"] == "from-body"


def test_a_list_body_reads_as_the_list_and_answers_the_envelope_names() -> None:
    body = [{"id": 1}, {"id": 2}]

    view = http_view(body, HTTP)
    output = output_view(body, None, HTTP)

    assert isinstance(view, ListView)
    assert view == body
    assert [item["id"] for item in view] == [1, 2]
    assert view["data"] == body
    assert view["status_code"] == 200
    assert view.get("headers") == HTTP["headers"]
    assert view.get("missing", "d") == "d"
    assert view[1] == {"id": 2}
    with pytest.raises(KeyError):
        view["missing"]
    assert read("fetch.data | length", fetch=view) == 2
    assert read("fetch.body[0].id", fetch=view) == 1
    assert read("fetch.status_code", fetch=view) == 200
    assert read("fetch['status_code']", fetch=view) == 200
    assert read("fetch | length", fetch=view) == 2
    assert read("'json ' ~ fetch | tojson", fetch=view) == 'json [{"id":1},{"id":2}]'
    assert read("output.data.data[1].id", output=output) == 2
    assert read("output.data.status_code", output=output) == 200


def test_a_list_views_own_attributes_stay_hidden_from_templates() -> None:
    view = http_view([1], HTTP)

    assert read("fetch._names", fetch=view) is None  # the sandbox hides underscored attributes
    with pytest.raises(TemplateError):
        read("fetch._names.status_code", fetch=view)


@pytest.mark.parametrize(("status", "kind"), [
    (500, "server_error"), (502, "server_error"), (503, "server_error"), (599, "server_error"),
    (429, "rate_limit"), (401, "auth"), (403, "auth"), (404, "not_found"), (400, "client_error"),
    (409, "client_error"), (422, "client_error"),
])
def test_status_kind_follows_noetls_classes(status: int, kind: str) -> None:
    assert status_kind(status) == kind


def test_status_fields_name_the_status_every_way_and_read_retry_after() -> None:
    assert status_fields(429, {"Retry-After": "7"}) == {
        "status": 429, "status_code": 429, "http_status": 429, "code": "HTTP_429", "retry_after": 7}
    assert "retry_after" not in status_fields(503, {"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"})


# -- sql ------------------------------------------------------------------------------------------

def test_one_statement_reads_as_command_0_beside_its_rows() -> None:
    result = {"columns": ["n"], "rows": [{"n": 1}], "row_count": 1}

    view = sql_view(result)

    assert view["rows"] == [{"n": 1}]
    assert view["command_0"] == {"status": "success", **result}
    assert read("q.command_0.rows[0].n", q=view) == 1


def test_script_reads_every_statement_as_command_i_and_stores_the_last_once() -> None:
    rows = {"columns": ["n"], "rows": [{"n": 2}], "row_count": 1}
    stored = script_payload([{"affected_rows": 0}, {"affected_rows": 2}, rows])

    assert stored == {**rows, "statement_count": 3, "command_0": {"affected_rows": 0},
                      "command_1": {"affected_rows": 2}}
    view = sql_view(stored)
    assert view["command_0"] == {"status": "success", "affected_rows": 0, "row_count": 0}
    assert view["command_1"] == {"status": "success", "affected_rows": 2, "row_count": 2}
    assert view["command_2"] == {"status": "success", **rows}
    assert view["rows"] == [{"n": 2}]


def test_script_without_stored_statements_gets_no_view_and_other_results_none() -> None:
    duckdb_like = {"columns": ["n"], "rows": [], "row_count": 0, "statement_count": 2}

    assert sql_view(duckdb_like) == duckdb_like
    assert sql_view({"rows": [1]}) == {"rows": [1]}
    assert sql_view([1, 2]) == [1, 2]
    assert step_view({"affected_rows": 1}, None, False)["command_0"]["row_count"] == 1


# -- loops ----------------------------------------------------------------------------------------

def test_loop_results_answer_stats_beside_results_and_count() -> None:
    loop = step_view([{"a": 1}, {"a": 2}, None], None, True)

    assert isinstance(loop, LoopResults)
    assert read("l.stats.total", l=loop) == 3
    assert read("l.stats", l=loop) == {"total": 3, "success": 3, "failed": 0}
    assert read("l.count", l=loop) == 3
    assert loop.get("stats") == {"total": 3, "success": 3, "failed": 0}
    assert loop["stats"]["total"] == 3
    assert loop["results"] == [{"a": 1}, {"a": 2}, None]
    assert loop["count"] == 3
    assert loop.encoded() == {"__noetl_list_view__": [{"a": 1}, {"a": 2}, None],
                              "names": {"count": 3, "stats": {"total": 3, "success": 3,
                                                              "failed": 0}},
                              "itself": ["results"]}
    assert read("output.data.stats.total", output=output_view([1, 2], None, None, loop=True)) == 2


# -- output in router templates -------------------------------------------------------------------

def test_router_reads_output_in_step_set_and_arc_when() -> None:
    harness = RouterHarness(parse("""
        workflow:
          - step: start
            tool: {kind: http, url: http://api}
            set:
              ctx.total: "{{ output.data.data.total }}"
              ctx.code: "{{ output.status_code }}"
            next:
              spec: {mode: exclusive}
              arcs:
                - step: many
                  when: "{{ output.data.data.total > 10 and output.status == 'ok' }}"
                - step: few
          - step: many
          - step: few
    """))

    harness.run(lambda c: Reply(result={"total": 12}, http={"status": 200, "headers": {}})
                if c["step"] == "start" else Reply())

    assert harness.fired_steps() == ["start", "many"]
    assert harness.state.ctx == {"total": 12, "code": 200}


def test_router_routes_a_failure_on_output_error_kind() -> None:
    harness = RouterHarness(parse("""
        workflow:
          - step: start
            tool: {kind: http, url: http://api}
            next:
              arcs:
                - step: later
                  when: "{{ output.status == 'error' and output.error.kind == 'rate_limit' }}"
          - step: later
    """))

    harness.run(lambda c: Reply(ok=False, error={"kind": "rate_limit", "status": 429,
                                                 "message": "HTTP 429"},
                                http={"status": 429, "headers": {}})
                if c["step"] == "start" else Reply())

    assert harness.fired_steps() == ["start", "later"]
    assert harness.state.status == "completed"


def test_job_namespace_names_the_execution_unless_a_name_job_is_in_scope() -> None:
    from noetl_stream.dsl.context import build_context

    context = build_context(workload={}, ctx={}, execution_id="383521785662206580")
    # A number here as in NoETL, whose execution ids are numbers.
    assert templating.render_string("{{ job.execution_id }}", context) == 383521785662206580
    assert templating.render_string("id={{ job.uuid }}", context) == "id=383521785662206580"
    hidden = build_context(workload={"job": {"execution_id": "mine"}}, ctx={}, execution_id="1")
    assert templating.render_string("{{ job.execution_id }}", hidden) == "mine"


def test_a_mapping_step_result_answers_data_with_itself_only_in_templates() -> None:
    view = step_view({"total": 3}, None, False)
    context = {"run": view}
    assert templating.render_string("{{ run.data.total }}", context) == 3
    assert templating.render_string("{{ run }}", context) == {"total": 3}
    assert templating.render_string("json {{ run | tojson }}", context) == 'json {"total":3}'
    own = step_view({"data": [1, 2]}, None, False)
    assert templating.render_string("{{ run.data }}", {"run": own}) == [1, 2]


def test_http_output_data_reads_as_the_envelope_in_templates_and_keeps_the_bodys_data_key() -> None:
    body = {"data": [{"id": 1}], "paging": {"hasMore": True}}
    output = output_view(body, None, {"status": 200, "headers": {}})
    context = {"output": output}
    # A template written for NoETL's Python envelope: `.data.data` is the whole body.
    assert templating.render_string("{{ output.data.data.paging.hasMore }}", context) is True
    # Code bound to `{{ output }}` reads `["data"]["data"]` as the body's own `data`.
    rendered = templating.render_string("{{ output }}", context)
    assert rendered["data"]["data"] == [{"id": 1}]
    assert rendered["data"]["status_code"] == 200
    assert templating.render_string("{{ output.data.paging.hasMore }}", context) is True
