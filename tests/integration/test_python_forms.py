"""Python `context`, `libs:` and templates in code, and `script:` files for python, postgres and
duckdb, through the real server and worker; each form also fails its step when it should."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
from plain_client import EventFeed, PlainClient

from noetl_stream.dsl.composition import load_with_children
from optional_extras import needs_duckdb

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("services")]

HEADER = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata:\n  name: forms\n"


def playbook(body: str) -> str:
    return HEADER + textwrap.dedent(body).lstrip("\n")


def loaded_text(folder: Path, body: str, files: dict[str, str]) -> str:
    """The text `noetl-stream run` sends for a playbook file and its script files, after which
    the files are deleted: the server and the worker must not need them."""
    for name, text in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (folder / "pb.yaml").write_text(playbook(body))
    text = load_with_children(folder / "pb.yaml").files[0].text
    for name in files:
        (folder / name).unlink()
    return text


def completed(feed: EventFeed) -> dict[str, Any]:
    final = feed.final
    assert final["event_type"] == "execution.completed", final.get("error")
    return final


def failed_at(feed: EventFeed, step: str) -> dict[str, Any]:
    """The failed step's error, after checking the run failed there (and never completed)."""
    final = feed.final
    assert final["event_type"] == "execution.failed", final
    assert final["error"]["step"] == step
    assert final["steps"][step]["status"] == "failed"
    assert feed.of("execution.completed") == []
    error: dict[str, Any] = final["error"]
    return error


async def test_code_reads_context_with_earlier_steps_args_and_execution_id(
        client: PlainClient) -> None:
    feed = await client.run("ctx-1", playbook("""
        workload: {n: 5, unused: [1, 2]}
        workflow:
          - step: start
            tool: {kind: python, code: "result = {'rows': [1, 2, 3]}"}
            next: [middle]
          - step: middle
            tool: {kind: noop}
            next: [read]
          - step: read
            args: {factor: 10}
            tool:
              kind: python
              input: {extra: 1}
              code: |
                def main(context, factor, n):
                    return {"exec": context["execution_id"], "step": context["step"],
                            "rows": context["start"]["rows"], "done": sorted(
                                k for k in ("start", "middle") if k in context),
                            "unused": context["workload"]["unused"], "factor": factor, "n": n,
                            "args": context["args"], "job": context["job"]["execution_id"]}
    """))

    assert completed(feed)["result"] == {
        "exec": "ctx-1", "step": "read", "rows": [1, 2, 3], "done": ["middle", "start"],
        "unused": [1, 2], "factor": 10, "n": 5, "args": {"factor": 10, "extra": 1},
        "job": "ctx-1"}


async def test_code_that_reads_a_missing_context_key_fails_its_step(client: PlainClient) -> None:
    feed = await client.run("ctx-2", playbook("""
        workflow:
          - step: start
            tool: {kind: python, code: "result = context['no_such_step']['x']"}
    """))

    assert "KeyError: 'no_such_step'" in failed_at(feed, "start")["message"]


async def test_libs_import_a_stdlib_module_under_its_alias(client: PlainClient) -> None:
    feed = await client.run("libs-1", playbook("""
        workflow:
          - step: start
            tool:
              kind: python
              libs:
                b64: base64
                sha: {from: hashlib, import: sha256}
              code: |
                result = {"b64": b64.b64encode(b"noetl").decode(), "sha": sha(b"").hexdigest()[:8]}
    """))

    assert completed(feed)["result"] == {"b64": "bm9ldGw=", "sha": "e3b0c442"}


async def test_missing_libs_module_fails_the_step_naming_the_module(client: PlainClient) -> None:
    feed = await client.run("libs-2", playbook("""
        workflow:
          - step: start
            tool:
              kind: python
              libs: {nx: noetl_no_such_module}
              code: "result = 1"
            next: [after]
          - step: after
            tool: {kind: noop}
    """))

    error = failed_at(feed, "start")
    assert error["kind"] == "import"
    assert error["module"] == "noetl_no_such_module"
    assert "libs: module noetl_no_such_module (as nx) is not installed on this worker" \
        in error["message"]
    assert "after" not in feed.final["steps"]


async def test_templates_in_code_render_and_dicts_and_f_strings_stay(client: PlainClient) -> None:
    feed = await client.run("tmpl-1", playbook("""
        workload: {n: 21, label: x}
        workflow:
          - step: start
            tool:
              kind: python
              code: |
                d = {"k": {"v": {{ workload.n }} * 2}}
                result = {"doubled": d["k"]["v"], "text": f"{d['k']['v']}-{{ workload.label }}",
                          "braces": f"{{ '{{' }}literal{{ '}}' }}"}
    """))

    assert completed(feed)["result"] == {"doubled": 42, "text": "42-x", "braces": "{literal}"}


async def test_template_that_fails_to_render_in_code_fails_the_step(client: PlainClient) -> None:
    feed = await client.run("tmpl-2", playbook("""
        workload: {zero: 0}
        workflow:
          - step: start
            tool:
              kind: python
              code: "result = {{ 1 / workload.zero }}"
    """))

    error = failed_at(feed, "start")
    assert error["kind"] == "template"
    assert "ZeroDivisionError" in error["message"]


async def test_python_script_file_travels_with_the_playbook(client: PlainClient,
                                                            tmp_path: Path) -> None:
    text = loaded_text(tmp_path, """
        workload: {n: 4}
        workflow:
          - step: start
            tool:
              kind: python
              script: {uri: ./scripts/square.py, source: {type: file}}
              input: {n: "{{ workload.n }}"}
    """, {"scripts/square.py": "label = f'{{n}}'  # an f-string, not a template\n"
                               "result = {'square': n * n, 'label': label}\n"})

    feed = await client.run("script-py-1", text)

    assert completed(feed)["result"] == {"square": 16, "label": "{n}"}


async def test_python_script_that_raises_fails_the_step_naming_the_file(client: PlainClient,
                                                                        tmp_path: Path) -> None:
    text = loaded_text(tmp_path, """
        workflow:
          - step: start
            tool:
              kind: python
              script: {uri: ./boom.py, source: {type: file}}
    """, {"boom.py": "x = 1\nraise RuntimeError('bad input file')\n"})

    feed = await client.run("script-py-2", text)

    error = failed_at(feed, "start")
    assert "RuntimeError: bad input file" in error["message"]
    assert 'File "./boom.py", line 2' in error["traceback"]


async def test_file_script_that_did_not_travel_is_rejected_by_the_server(client: PlainClient) -> None:
    feed = await client.run("script-py-3", playbook("""
        workflow:
          - step: start
            tool:
              kind: python
              script: {uri: ./gone.py, source: {type: file}}
    """))

    final = feed.final
    assert final["event_type"] == "execution.rejected"
    (reason,) = final["errors"]
    assert 'step "start" field "tool.script.uri": script file "./gone.py" did not travel' in reason


async def test_postgres_script_file_runs_with_its_templates_rendered(
        client: PlainClient, tmp_path: Path, pg_dsn: str) -> None:
    text = loaded_text(tmp_path, """
        workload: {n: 3}
        workflow:
          - step: start
            tool:
              kind: postgres
              connection: "{{ workload.dsn }}"
              script: {uri: ./sql/load.sql, source: {type: file}}
    """, {"sql/load.sql": "CREATE TABLE items (id int);\n"
                          "INSERT INTO items SELECT generate_series(1, {{ workload.n }});\n"
                          "SELECT count(*)::int AS n FROM items;\n"})

    feed = await client.run("script-pg-1", text, payload={"dsn": pg_dsn})

    result = completed(feed)["result"]
    assert (result["rows"], result["statement_count"]) == ([{"n": 3}], 3)


async def test_postgres_script_with_a_failing_statement_fails_the_step(
        client: PlainClient, tmp_path: Path, pg_dsn: str) -> None:
    text = loaded_text(tmp_path, """
        workflow:
          - step: start
            tool:
              kind: postgres
              connection: "{{ workload.dsn }}"
              script: {uri: ./bad.sql, source: {type: file}}
    """, {"bad.sql": "SELECT 1;\nSELECT * FROM no_such_table;\n"})

    feed = await client.run("script-pg-2", text, payload={"dsn": pg_dsn})

    error = failed_at(feed, "start")
    assert error["kind"] == "postgres"
    assert error["statement"] == 2
    assert "no_such_table" in error["message"]


@needs_duckdb
async def test_duckdb_script_file_runs(client: PlainClient, tmp_path: Path) -> None:
    text = loaded_text(tmp_path, """
        workload: {limit: 10}
        workflow:
          - step: start
            tool:
              kind: duckdb
              script: {uri: totals.sql, source: {type: file}}
    """, {"totals.sql": "CREATE TABLE t AS SELECT i FROM range({{ workload.limit }}) r(i);\n"
                        "SELECT count(*) AS n, sum(i)::BIGINT AS s FROM t;\n"})

    feed = await client.run("script-duck-1", text)

    assert completed(feed)["result"] == {"columns": ["n", "s"], "rows": [{"n": 10, "s": 45}],
                                         "row_count": 1, "statement_count": 2}


@needs_duckdb
async def test_duckdb_script_with_an_error_fails_the_step(client: PlainClient,
                                                          tmp_path: Path) -> None:
    text = loaded_text(tmp_path, """
        workflow:
          - step: start
            tool:
              kind: duckdb
              script: {uri: bad.sql, source: {type: file}}
    """, {"bad.sql": "SELECT * FROM missing_table;\n"})

    feed = await client.run("script-duck-2", text)

    error = failed_at(feed, "start")
    assert error["kind"] == "duckdb"
    assert "missing_table" in error["message"]


async def test_code_in_a_loop_iteration_reads_its_item_index_and_total_as_variables(
        client: PlainClient) -> None:
    # NoETL's server adds the iterator's item, `_index` and `_total` to a python task's args,
    # which its tool makes globals, `input_data` keys and `main(...)` parameters.
    feed = await client.run("loop-globals", playbook("""
        workload: {cities: [Oslo, Rome]}
        workflow:
          - step: start
            loop: {in: "{{ workload.cities }}", iterator: city}
            tool:
              kind: python
              input: {tag: "t"}
              code: |
                result = {"city": city, "i": _index, "n": _total, "data": input_data["city"],
                          "tag": tag}
        """))

    assert completed(feed)["steps"]["start"]["result"] == [
        {"city": "Oslo", "i": 0, "n": 2, "data": "Oslo", "tag": "t"},
        {"city": "Rome", "i": 1, "n": 2, "data": "Rome", "tag": "t"}]
