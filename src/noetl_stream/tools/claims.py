"""Claiming a cursor loop's item on PostgreSQL at most once per claim key.

A claim and its record commit in one transaction: the playbook's claim SQL marks a row claimed
and returns it, and the same transaction writes `claim_key -> row` into the ledger table
`noetl_cursor_claims` (created on first use in the connection's default schema). A command that
comes back after its worker died reads the row its key already claimed instead of claiming
another; a claim that found nothing is recorded too (row NULL), so a redelivered exhausted
iteration stays exhausted. If the worker dies before the commit, nothing was claimed or recorded.
A transaction-scoped advisory lock on the key makes two deliveries of one command that overlap
wait for each other rather than claim twice.

A claim must return at most one row: more would leave rows claimed that no iteration runs, so
the transaction is rolled back and the claim fails. Ledger entries older than 30 days (the event
log's retention: no command of theirs can come back) are deleted when a worker first uses a
database.
"""

from __future__ import annotations

from dataclasses import dataclass

from asyncpg.pool import PoolConnectionProxy

from noetl_stream.jsonutil import JsonObject, JsonValue
from noetl_stream.tools.sql import json_safe

LEDGER = "noetl_cursor_claims"
KEPT_DAYS = 30
_CREATE = (f"CREATE TABLE IF NOT EXISTS {LEDGER} (claim_key text PRIMARY KEY, claimed_row jsonb, "
           "claimed_at timestamptz NOT NULL DEFAULT now())")
# One lock for the ledger's creation in a database: the key is the table's name.
_CREATE_LOCK = f"SELECT pg_advisory_xact_lock(hashtextextended('{LEDGER}', 0))"
_PURGE = f"DELETE FROM {LEDGER} WHERE claimed_at < now() - interval '{KEPT_DAYS} days'"
_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))"
_READ = f"SELECT claimed_row FROM {LEDGER} WHERE claim_key = $1"
_RECORD = f"INSERT INTO {LEDGER} (claim_key, claimed_row) VALUES ($1, $2)"


class ClaimShapeError(ValueError):
    """The claim SQL returned more than one row (the claim was rolled back)."""

    def __init__(self, rows: int) -> None:
        self.rows = rows
        super().__init__(f"the claim returned {rows} rows; it must claim one item at a time "
                         "(LIMIT {{ __frame_max_rows }}, which is 1) or none when nothing is "
                         "left; nothing was claimed")


@dataclass(frozen=True)
class Claimed:
    row: JsonObject | None  # None: nothing left to claim
    replayed: bool  # the row was claimed by an earlier delivery of the same command


async def prepare_ledger(conn: PoolConnectionProxy) -> None:
    """Create the ledger if needed and drop entries no command can come back for."""
    # `CREATE TABLE IF NOT EXISTS` racing another worker's can fail on the table's row type
    # (42710) or catalog entry (23505); the lock makes creations take turns instead.
    async with conn.transaction():
        await conn.execute(_CREATE_LOCK)
        await conn.execute(_CREATE)
        await conn.execute(_PURGE)


async def claim_once(conn: PoolConnectionProxy, statements: list[str], claim_key: str,
                     timeout_s: float) -> Claimed:
    """Run the claim (its statements in order, the last one returning the row) unless
    `claim_key` already claimed; record what it claimed. asyncpg errors propagate.
    """
    async with conn.transaction():
        # SET LOCAL ends with the transaction; the client-side timeouts cover the network too.
        await conn.execute(f"SET LOCAL statement_timeout = {max(1, round(timeout_s * 1000))}")
        await conn.execute(_LOCK, claim_key, timeout=timeout_s)
        prior = await conn.fetchrow(_READ, claim_key, timeout=timeout_s)
        if prior is not None:
            return Claimed(_row_of(prior["claimed_row"]), replayed=True)
        for statement in statements[:-1]:
            await conn.execute(statement, timeout=timeout_s)
        rows = await conn.fetch(statements[-1], timeout=timeout_s)
        if len(rows) > 1:
            raise ClaimShapeError(len(rows))  # leaving the block rolls the claim back
        row = {str(k): json_safe(v) for k, v in rows[0].items()} if rows else None
        await conn.execute(_RECORD, claim_key, row, timeout=timeout_s)
    return Claimed(row, replayed=False)


def _row_of(value: JsonValue) -> JsonObject | None:
    return value if isinstance(value, dict) else None
