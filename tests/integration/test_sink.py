"""`sink` through the whole stack: a real nats-server, the router and a worker writing into a
DuckDB file and into PostgreSQL, and later steps reading the rows back."""

from __future__ import annotations

from pathlib import Path

import asyncpg
import pytest
from plain_client import PlainClient

from noetl_stream.runtime.connection import Bus
from noetl_stream.testing.events import stored_events

pytestmark = pytest.mark.integration

PLAYBOOK = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: sink_roundtrip
workload:
  items: [{id: 1, name: a}, {id: 2, name: bb}, {id: 3, name: ccc}]
workflow:
  - step: start
    tool:
      - duck:
          kind: duckdb
          command: "CREATE TABLE items (id INTEGER PRIMARY KEY, name VARCHAR, size INTEGER)"
      - pg:
          kind: postgres
          connection: "{{ workload.dsn }}"
          command: "CREATE TABLE long_names (id int PRIMARY KEY, name text NOT NULL)"
    next: each
  - step: each
    loop: {in: "{{ workload.items }}", iterator: item}
    tool:
      kind: python
      input: {item: "{{ iter.item }}"}
      code: "result = {'id': item['id'], 'name': item['name'], 'size': len(item['name'])}"
    sink:
      tool: {kind: duckdb}
      table: items
      args: {id: "{{ result.id }}", name: "{{ data.name }}", size: "{{ result.size }}"}
    case:
      - when: "{{ event.name == 'call.done' and result.size > 1 }}"
        then:
          sink:
            tool: {kind: postgres, connection: "{{ workload.dsn }}"}
            table: long_names
            mode: upsert
            key: id
            args: {id: "{{ result.id }}", name: "{{ result.name }}"}
    next: read
  - step: read
    tool:
      - duck:
          kind: duckdb
          query: "SELECT id, name, size FROM items ORDER BY id"
      - pg:
          kind: postgres
          connection: "{{ workload.dsn }}"
          query: "SELECT id, name FROM long_names ORDER BY id"
      - both:
          kind: python
          input: {duck: "{{ duck.rows }}", pg: "{{ pg.rows }}"}
          code: "result = {'duck': duck, 'pg': pg}"
"""


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
    playbook = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: sink_fails
workflow:
  - step: start
    tool: {kind: python, code: "result = {'id': 1}"}
    sink: {kind: duckdb, table: missing, args: {id: "{{ result.id }}"}}
"""
    feed = await client.run("sink-2", playbook)

    final = feed.final
    assert final["event_type"] == "execution.failed"
    assert 'task "start_sink" (duckdb) failed' in str(final.get("error"))
