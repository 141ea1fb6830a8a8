"""The duckdb tool on real DuckDB files, directly and through the stack."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import duckdb
import pytest
from plain_client import PlainClient

from noetl_stream.errors import ToolError
from noetl_stream.tools.base import Credential, TaskCall, ToolServices
from noetl_stream.tools.duckdb import DuckdbTool

pytestmark = pytest.mark.integration

CONFORMANCE_SCRIPT = """\
CREATE TABLE t AS SELECT i FROM range(10) r(i);
SELECT count(*) AS n, sum(i)::BIGINT AS s FROM t;
"""


class Credentials:
    def __init__(self, **known: Credential) -> None:
        self.known = known

    async def resolve(self, name: str, *, execution_id: str | None = None) -> Credential:
        try:
            return self.known[name]
        except KeyError:
            raise ToolError(f'no credential named "{name}"') from None


@pytest.fixture
def tool(tmp_path: Path) -> DuckdbTool:
    return DuckdbTool(ToolServices(home=tmp_path))


def call(execution_id: str = "e1", spec: dict[str, Any] | None = None, **config: Any) -> TaskCall:
    return TaskCall(execution_id=execution_id, step="s", task="t", kind="duckdb", config=config,
                    input={}, spec=spec or {}, idempotency_key=f"{execution_id}.s.1:None:t:1")


async def test_script_gives_the_last_statements_rows(tool: DuckdbTool) -> None:
    outcome = await tool.run(call(command=CONFORMANCE_SCRIPT))

    assert outcome.ok, outcome.error
    assert outcome.result == {"columns": ["n", "s"], "rows": [{"n": 10, "s": 45}], "row_count": 1,
                              "statement_count": 2}


async def test_statements_without_rows_give_affected_rows(tool: DuckdbTool) -> None:
    created = await tool.run(call(command="CREATE TABLE t (i INTEGER)"))
    inserted = await tool.run(call(command="INSERT INTO t SELECT * FROM range(4)"))
    returned = await tool.run(call(command="INSERT INTO t VALUES (9) RETURNING i"))
    counted = await tool.run(call(query="SELECT count(*) AS Count FROM t"))

    assert created.result == {"affected_rows": 0}
    assert inserted.result == {"affected_rows": 4}
    assert returned.result == {"columns": ["i"], "rows": [{"i": 9}], "row_count": 1}
    assert counted.result["rows"] == [{"Count": 5}]


async def test_steps_of_one_execution_share_its_database_file(tool: DuckdbTool, tmp_path: Path) -> None:
    await tool.run(call("exec-a", command="CREATE TABLE shared AS SELECT 42 AS answer"))

    same = await tool.run(call("exec-a", query="SELECT answer FROM shared"))
    other = await tool.run(call("exec-b", query="SELECT answer FROM shared"))

    assert same.result["rows"] == [{"answer": 42}]
    assert (tmp_path / "duckdb" / "exec-a.duckdb").is_file()
    assert other.error is not None and "shared" in other.error["message"]


async def test_without_a_home_the_file_goes_to_the_temp_folder() -> None:
    path = DuckdbTool().db_path(call("exec/../x"))

    assert Path(path).parent.name == "duckdb"
    assert Path(path).name == "exec_.._x.duckdb"


async def test_memory_db_path_is_private_to_the_task(tool: DuckdbTool, tmp_path: Path) -> None:
    await tool.run(call(db_path=":memory:", command="CREATE TABLE m AS SELECT 1 AS x"))

    again = await tool.run(call(db_path=":memory:", query="SELECT x FROM m"))
    explicit = await tool.run(call(db_path=str(tmp_path / "own.duckdb"), query="SELECT 7 AS seven"))

    assert again.error is not None
    assert explicit.result["rows"] == [{"seven": 7}]
    assert (tmp_path / "own.duckdb").is_file()


async def test_params_positional_and_named(tool: DuckdbTool) -> None:
    script = "CREATE TABLE p (id INTEGER, name VARCHAR); INSERT INTO p VALUES (?, ?); " \
             "SELECT name FROM p WHERE id = $1"
    positional = await tool.run(call(command=script, params=[1, "ada"]))
    named = await tool.run(call(query="SELECT $a + $b AS total, '$a' AS literal",
                                params={"a": 40, "b": 2, "unused": 0}))

    assert positional.result["rows"] == [{"name": "ada"}]
    assert named.result["rows"] == [{"total": 42, "literal": "$a"}]


async def test_as_objects_false_gives_rows_as_lists(tool: DuckdbTool) -> None:
    outcome = await tool.run(call(query="SELECT 1 AS a, 'b' AS b", as_objects=False))

    assert outcome.result == {"columns": ["a", "b"], "rows": [[1, "b"]], "row_count": 1}


async def test_values_come_back_json_safe(tool: DuckdbTool) -> None:
    query = """SELECT 1.50::DECIMAL(10, 2) AS dec, 3::DECIMAL(10, 2) AS whole,
                      12345678901234567.123::DECIMAL(38, 3) AS big, DATE '2024-02-29' AS d,
                      TIMESTAMP '2024-02-29 12:30:00' AS ts, INTERVAL 90 SECOND AS i,
                      'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::UUID AS u, '\\x00\\xFF'::BLOB AS b,
                      '{"k": [1, null]}'::JSON AS j, {'a': 1, 'b': [DATE '2024-01-01']} AS st,
                      [1, 2] AS lst, MAP {'k': 1} AS m, NULL AS nothing"""

    outcome = await tool.run(call(query=query))

    assert outcome.ok, outcome.error
    (row,) = outcome.result["rows"]
    assert row == {"dec": 1.5, "whole": 3, "big": "12345678901234567.123", "d": "2024-02-29",
                   "ts": "2024-02-29T12:30:00", "i": 90.0,
                   "u": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "b": "AP8=", "j": {"k": [1, None]},
                   "st": {"a": 1, "b": ["2024-01-01"]}, "lst": [1, 2], "m": {"k": 1}, "nothing": None}


async def test_parquet_and_csv_round_trip(tool: DuckdbTool, tmp_path: Path) -> None:
    parquet = tmp_path / "out" / "items.parquet"
    csv = tmp_path / "out" / "items.csv"
    parquet.parent.mkdir()
    script = f"""
        CREATE TABLE items AS SELECT i AS id, 'item-' || i AS name FROM range(3) r(i);
        COPY items TO '{parquet}' (FORMAT parquet);
        COPY (SELECT * FROM read_parquet('{parquet}') WHERE id > 0) TO '{csv}' (HEADER);
        SELECT * FROM read_csv('{csv}') ORDER BY id;
    """

    outcome = await tool.run(call(command=script))

    assert outcome.ok, outcome.error
    assert outcome.result["rows"] == [{"id": 1, "name": "item-1"}, {"id": 2, "name": "item-2"}]
    assert duckdb.sql(f"SELECT count(*) FROM '{parquet}'").fetchall() == [(3,)]


async def test_sql_error_names_the_statement(tool: DuckdbTool) -> None:
    outcome = await tool.run(call(command="SELECT 1; SELECT * FROM missing_table"))

    assert outcome.error is not None
    assert outcome.error["kind"] == "duckdb"
    assert outcome.error["exception_type"] == "CatalogException"
    assert "missing_table" in outcome.error["message"]
    assert "(statement 2 of 2)" in outcome.error["message"]
    syntax = await tool.run(call(query="SELEC 1"))
    assert syntax.error is not None and syntax.error["exception_type"] == "ParserException"


async def test_timeout_interrupts_the_query_and_the_file_stays_usable(tool: DuckdbTool) -> None:
    started = time.monotonic()

    outcome = await tool.run(call(spec={"timeout": 0.3},
                                  query="SELECT count(*) FROM range(1000000000000) a"))

    assert time.monotonic() - started < 5
    assert outcome.error is not None
    assert outcome.error["kind"] == "timeout"
    assert "timeout of 0.3s" in outcome.error["message"]
    again = await tool.run(call(query="SELECT 1 AS one"))
    assert again.result["rows"] == [{"one": 1}]


async def test_queries_run_off_the_event_loop(tool: DuckdbTool) -> None:
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    task = asyncio.create_task(ticker())
    try:
        outcome = await tool.run(call(spec={"timeout": 0.5},
                                      query="SELECT count(*) FROM range(1000000000000) a"))
    finally:
        task.cancel()

    assert outcome.error is not None and outcome.error["kind"] == "timeout"
    assert ticks >= 10


async def test_auth_attaches_a_postgres_credential_or_says_how_to_get_the_extension(
        tmp_path: Path, pg_dsn: str) -> None:
    credentials = Credentials(pg=Credential("pg", "postgres", {"dsn": pg_dsn}),
                              token=Credential("token", "bearer", {"token": "t"}))
    tool = DuckdbTool(ToolServices(credentials=credentials, home=tmp_path))

    outcome = await tool.run(call(auth="pg", query="SELECT 1 AS one"))
    wrong_kind = await tool.run(call(auth="token", query="SELECT 1"))
    no_store = await DuckdbTool().run(call(auth="pg", query="SELECT 1"))

    if outcome.ok:  # DuckDB's postgres extension is installed (or could be downloaded)
        assert outcome.result["rows"] == [{"one": 1}]
    else:
        assert outcome.error is not None
        assert outcome.error["kind"] == "extension"
        assert "INSTALL postgres" in outcome.error["message"]
        assert 'credential "pg"' in outcome.error["message"]
    assert pg_dsn not in repr(outcome)
    assert wrong_kind.error is not None and 'of kind "bearer"' in wrong_kind.error["message"]
    assert no_store.error is not None and no_store.error["kind"] == "credential"


async def test_playbook_steps_share_the_execution_database(services: None, client: PlainClient,
                                                           noetl_home: Path) -> None:
    playbook = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: duck_steps
workload:
  limit: 10
workflow:
  - step: start
    tool:
      kind: duckdb
      command: |
        CREATE TABLE t AS SELECT i FROM range({{ workload.limit }}) r(i);
        SELECT count(*) AS n, sum(i)::BIGINT AS s FROM t;
    next:
      arcs:
        - step: again
  - step: again
    tool:
      kind: duckdb
      query: "SELECT max(i) AS top FROM t WHERE i < $1"
      params: ["{{ start.rows[0].n }}"]
"""
    feed = await client.run("duck-e2e-1", playbook)

    final = feed.final
    assert final["event_type"] == "execution.completed", final.get("error")
    assert final["steps"]["start"]["result"] == {"columns": ["n", "s"], "rows": [{"n": 10, "s": 45}],
                                                 "row_count": 1, "statement_count": 2}
    assert final["result"] == {"columns": ["top"], "rows": [{"top": 9}], "row_count": 1}
    assert (noetl_home / "duckdb" / "duck-e2e-1.duckdb").is_file()
