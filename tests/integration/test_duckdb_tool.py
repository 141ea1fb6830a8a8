"""The duckdb tool on real DuckDB files, directly and through the stack."""
# ruff: noqa: E402

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import pytest
from fixed_credentials import Credentials
from plain_client import PlainClient

from optional_extras import import_duckdb

# Skips without the duckdb extra; imported before the tool module, which imports it.
duckdb = import_duckdb()

from noetl_stream import jsonutil
from noetl_stream.bus.connection import Bus
from noetl_stream.bus.nats_server import free_port
from noetl_stream.credentials import Credential
from noetl_stream.state.credentials import CredentialStore
from noetl_stream.state.crypto import SecretBox
from noetl_stream.testing.events import stored_events
from noetl_stream.tools import duckdb as duckdb_tool
from noetl_stream.tools.base import TaskCall, ToolServices
from noetl_stream.tools.duckdb import DuckdbTool
from playbook_files import read_playbook

pytestmark = pytest.mark.integration

CONFORMANCE_SCRIPT = """\
CREATE TABLE t AS SELECT i FROM range(10) r(i);
SELECT count(*) AS n, sum(i)::BIGINT AS s FROM t;
"""


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


async def test_timestamp_with_time_zone_values_are_returned_as_iso_text(tool: DuckdbTool) -> None:
    outcome = await tool.run(call(command="SELECT TIMESTAMPTZ '2026-01-02 03:04:05+00' AS t, "
                                          "NOW() AS now"))

    assert outcome.ok, outcome.error
    (row,) = outcome.result["rows"]
    assert row["t"] == "2026-01-02T03:04:05+00:00"
    assert isinstance(row["now"], str)


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
    outcome = await tool.run(call(spec={"timeout": 0.3},
                                  query="SELECT count(*) FROM range(1000000000000) a"))

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


def fields_of(dsn: str) -> dict[str, Any]:
    """The credential fields (host, port, user, password, database) of a postgresql:// DSN."""
    parts = urlsplit(dsn)
    return {"host": parts.hostname, "port": parts.port, "user": parts.username,
            "password": parts.password, "database": parts.path.lstrip("/")}


async def test_auth_attaches_postgres_for_reads_joins_and_writes(tmp_path: Path, pg_dsn: str) -> None:
    conn = await asyncpg.connect(pg_dsn)
    try:
        await conn.execute("CREATE TABLE orders (id int PRIMARY KEY, customer text NOT NULL, "
                           "amount numeric(10, 2) NOT NULL)")
        await conn.execute("INSERT INTO orders VALUES (1, 'ada', 10.50), (2, 'bob', 4.00), "
                           "(3, 'ada', 2.25)")
    finally:
        await conn.close()
    credentials = Credentials(pg=Credential("pg", "postgres", {"dsn": pg_dsn}))
    tool = DuckdbTool(ToolServices(credentials=credentials, home=tmp_path))

    read = await tool.run(call(auth="pg", query="SELECT id, customer, amount FROM pg.public.orders "
                                                "ORDER BY id"))
    joined = await tool.run(call(auth="pg", command="""
        CREATE TABLE customers AS SELECT * FROM (VALUES ('ada', 'London'), ('bob', 'Paris')) c(name, city);
        SELECT c.city, count(*) AS orders, sum(o.amount) AS total
        FROM pg.public.orders o JOIN customers c ON c.name = o.customer
        GROUP BY c.city ORDER BY c.city;
    """))
    written = await tool.run(call(auth="pg", command="""
        CREATE TABLE pg.public.city_totals AS
            SELECT c.city, sum(o.amount) AS total
            FROM pg.public.orders o JOIN customers c ON c.name = o.customer GROUP BY c.city;
        SELECT path FROM duckdb_databases() WHERE database_name = 'pg';
    """))

    assert read.ok, read.error
    assert read.result == {"columns": ["id", "customer", "amount"], "row_count": 3,
                           "rows": [{"id": 1, "customer": "ada", "amount": 10.5},
                                    {"id": 2, "customer": "bob", "amount": 4},
                                    {"id": 3, "customer": "ada", "amount": 2.25}]}
    assert joined.ok, joined.error
    assert joined.result["rows"] == [{"city": "London", "orders": 2, "total": 12.75},
                                     {"city": "Paris", "orders": 1, "total": 4}]
    assert written.ok, written.error
    password = fields_of(pg_dsn)["password"]
    (attached,) = written.result["rows"]
    assert password not in attached["path"]  # the password is kept in a redacted DuckDB secret
    conn = await asyncpg.connect(pg_dsn)
    try:
        rows = await conn.fetch("SELECT city, total FROM city_totals ORDER BY city")
    finally:
        await conn.close()
    assert [(r["city"], float(r["total"])) for r in rows] == [("London", 12.75), ("Paris", 4.0)]


async def test_auth_builds_the_connection_from_fields_under_the_given_alias(tmp_path: Path,
                                                                           pg_dsn: str) -> None:
    credentials = Credentials(
        fields=Credential("fields", "postgres", {**fields_of(pg_dsn), "sslmode": "disable"}),
        keywords=Credential("keywords", "postgres", {"dsn": " ".join(
            f"{k if k != 'database' else 'dbname'}='{v}'" for k, v in fields_of(pg_dsn).items())}))
    tool = DuckdbTool(ToolServices(credentials=credentials, home=tmp_path))

    outcome = await tool.run(call(auth={"wh": "fields", "kw": "keywords"}, command="""
        CREATE TABLE wh.public.marks AS SELECT 7 AS mark;
        SELECT (SELECT mark FROM wh.public.marks) AS via_fields,
               (SELECT mark FROM kw.public.marks) AS via_keywords;
    """))

    assert outcome.ok, outcome.error
    assert outcome.result["rows"] == [{"via_fields": 7, "via_keywords": 7}]


async def test_attach_errors_never_show_the_password(tmp_path: Path, pg_dsn: str) -> None:
    fields = fields_of(pg_dsn)
    secret = "Wr0ng-s3cret-pw"
    unreachable = f"postgresql://{fields['user']}:{secret}@127.0.0.1:{free_port()}/{fields['database']}"
    credentials = Credentials(
        wrong=Credential("wrong", "postgres", {**fields, "password": secret}),
        wrong_dsn=Credential("wrong_dsn", "postgres", {"dsn": pg_dsn.replace(fields["password"], secret)}),
        closed=Credential("closed", "postgres", {"dsn": unreachable}))
    tool = DuckdbTool(ToolServices(credentials=credentials, home=tmp_path))

    outcomes = {name: await tool.run(call(auth=name, query="SELECT 1"))
                for name in ("wrong", "wrong_dsn", "closed")}

    for name, outcome in outcomes.items():
        assert outcome.error is not None, name
        assert outcome.error["kind"] == "connection"
        assert f'cannot attach credential "{name}"' in outcome.error["message"]
        assert secret not in repr(outcome), name
    assert "password authentication failed" in outcomes["wrong"].error["message"]
    assert "refused" in outcomes["closed"].error["message"]


async def test_auth_rejects_other_kinds_and_needs_a_credential_store(tmp_path: Path) -> None:
    credentials = Credentials(token=Credential("token", "bearer", {"token": "t"}),
                              bad=Credential("bad", "postgres", {"dsn": "not a connection string"}))
    tool = DuckdbTool(ToolServices(credentials=credentials, home=tmp_path))

    wrong_kind = await tool.run(call(auth="token", query="SELECT 1"))
    bad_dsn = await tool.run(call(auth="bad", query="SELECT 1"))
    no_store = await DuckdbTool().run(call(auth="pg", query="SELECT 1"))

    assert wrong_kind.error is not None and 'of kind "bearer"' in wrong_kind.error["message"]
    assert bad_dsn.error is not None and bad_dsn.error["kind"] == "credential"
    assert "not a connection string" not in bad_dsn.error["message"]
    assert no_store.error is not None and no_store.error["kind"] == "credential"


def test_the_postgres_extension_comes_from_the_installed_package() -> None:
    platform = duckdb.sql("PRAGMA platform").fetchall()[0][0]

    packaged = duckdb_tool._packaged_extension(platform)

    assert packaged is not None and packaged.name == "postgres_scanner.duckdb_extension"
    assert packaged.parent.parent.name == f"v{duckdb.__version__}"


def test_without_the_package_the_extension_error_says_what_to_install(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    junk = tmp_path / "postgres_scanner.duckdb_extension"
    junk.write_bytes(b"not an extension")
    # An empty extension folder and a repository nobody listens on: DuckDB's own INSTALL fails too.
    con = duckdb.connect(config={"extension_directory": str(tmp_path / "ext"),
                                 "custom_extension_repository": f"http://127.0.0.1:{free_port()}"})
    try:
        monkeypatch.setattr(duckdb_tool, "_packaged_extension", lambda platform: None)
        absent = duckdb_tool._load_postgres_extension(con)
        monkeypatch.setattr(duckdb_tool, "_packaged_extension", lambda platform: junk)
        broken = duckdb_tool._load_postgres_extension(con)
    finally:
        con.close()

    assert absent is not None and "duckdb-ext-postgres package is not installed" in absent
    assert "could not install it either" in absent
    assert broken is not None and f"{junk} did not load" in broken


async def test_a_missing_extension_fails_the_task_with_kind_extension(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(duckdb_tool, "_load_postgres_extension", lambda con: "no extension here")
    credentials = Credentials(pg=Credential("pg", "postgres", {"dsn": "postgresql://u:pw-123@h/db"}))
    tool = DuckdbTool(ToolServices(credentials=credentials, home=tmp_path))

    outcome = await tool.run(call(auth="pg", query="SELECT 1"))

    assert outcome.error is not None
    assert outcome.error["kind"] == "extension"
    assert 'credential "pg"' in outcome.error["message"]
    assert f"duckdb-ext-postgres=={duckdb.__version__}" in outcome.error["message"]
    assert "INSTALL postgres" in outcome.error["message"]
    assert "pw-123" not in repr(outcome)


async def test_playbook_steps_share_the_execution_database(services: None, client: PlainClient,
                                                           noetl_home: Path) -> None:
    playbook = read_playbook("integration", "duckdb_tool_duck_steps.yaml")
    feed = await client.run("duck-e2e-1", playbook)

    final = feed.final
    assert final["event_type"] == "execution.completed", final.get("error")
    assert final["steps"]["start"]["result"] == {"columns": ["n", "s"], "rows": [{"n": 10, "s": 45}],
                                                 "row_count": 1, "statement_count": 2}
    assert final["result"] == {"columns": ["top"], "rows": [{"top": 9}], "row_count": 1}
    assert (noetl_home / "duckdb" / "duck-e2e-1.duckdb").is_file()


async def test_playbook_joins_postgres_through_a_stored_credential(
        pg_dsn: str, bus: Bus, services: None, client: PlainClient, noetl_home: Path) -> None:
    fields = fields_of(pg_dsn)
    await (await CredentialStore.open(bus.js, SecretBox.from_env(noetl_home))).set(
        "warehouse", "postgres", fields)
    conn = await asyncpg.connect(pg_dsn)
    try:
        await conn.execute("CREATE TABLE events AS "
                           "SELECT g AS id, g % 3 AS kind FROM generate_series(1, 9) g")
    finally:
        await conn.close()
    playbook = read_playbook("integration", "duckdb_tool_duck_pg.yaml")
    feed = await client.run("duck-pg-1", playbook)

    final = feed.final
    assert final["event_type"] == "execution.completed", final.get("error")
    assert final["steps"]["start"]["result"] == {
        "columns": ["name", "n"], "row_count": 3, "statement_count": 2,
        "rows": [{"name": "one", "n": 3}, {"name": "two", "n": 3}, {"name": "zero", "n": 3}]}
    assert final["result"] == {"columns": ["total"], "rows": [{"total": 9}], "row_count": 1,
                               "statement_count": 2}
    conn = await asyncpg.connect(pg_dsn)
    try:
        assert await conn.fetchval("SELECT sum(n) FROM kind_counts") == 9
    finally:
        await conn.close()
    events = await stored_events(bus.js, "duck-pg-1")
    assert events
    assert fields["password"] not in jsonutil.dumps_str(events)
