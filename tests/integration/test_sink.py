"""`sink` through the whole stack: a real nats-server, the router and a worker writing into a
DuckDB file and into PostgreSQL, and later steps reading the rows back."""

from __future__ import annotations

from pathlib import Path

import asyncpg
import pytest
from plain_client import PlainClient

from noetl_stream.bus.connection import Bus
from noetl_stream.testing.events import stored_events
from optional_extras import needs_duckdb
from playbook_files import read_playbook

pytestmark = [pytest.mark.integration, needs_duckdb]

PLAYBOOK = read_playbook("integration", "sink.yaml")


async def test_sinks_write_duckdb_and_postgres_and_a_later_step_reads_them(
        pg_dsn: str, bus: Bus, services: None, client: PlainClient, noetl_home: Path) -> None:
    feed = await client.run("sink-1", PLAYBOOK, payload={"dsn": pg_dsn})

    final = feed.final
    assert final["event_type"] == "execution.completed", final.get("error")
    # The sinks leave each iteration's result as the tool gave it.
    assert final["steps"]["each"]["result"] == [
        {"id": 1, "name": "a", "size": 1}, {"id": 2, "name": "bb", "size": 2},
        {"id": 3, "name": "ccc", "size": 3}]
    assert final["result"] == {
        "duck": [{"id": 1, "name": "a", "size": 1}, {"id": 2, "name": "bb", "size": 2},
                 {"id": 3, "name": "ccc", "size": 3}],
        "pg": [{"id": 2, "name": "bb"}, {"id": 3, "name": "ccc"}]}
    assert (noetl_home / "duckdb" / "sink-1.duckdb").is_file()
    conn = await asyncpg.connect(pg_dsn)
    try:
        assert await conn.fetchval("SELECT count(*) FROM long_names") == 2
    finally:
        await conn.close()
    events = await stored_events(bus.js, "sink-1")
    processed = sorted((e["task"], e["iteration"]) for e in events
                       if e.get("event_type") == "sink.processed" and e.get("status") == "ok")
    assert processed == [("each_case0_sink", 1), ("each_case0_sink", 2),
                         ("each_sink", 0), ("each_sink", 1), ("each_sink", 2)]


async def test_a_failed_sink_fails_the_step_with_the_sinks_error(
        services: None, client: PlainClient, noetl_home: Path) -> None:
    playbook = read_playbook("integration", "sink_fails.yaml")
    feed = await client.run("sink-2", playbook)

    final = feed.final
    assert final["event_type"] == "execution.failed"
    assert 'task "start_sink" (duckdb) failed' in str(final.get("error"))
