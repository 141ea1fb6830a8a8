"""`postgres`: SQL on PostgreSQL through asyncpg, with one pool per connection target per worker.

The target is `auth: <credential name>` (a credential of kind postgres holding `dsn`, or host,
port, user, password, database, sslmode) or an inline `connection:` (a `postgresql://` URI or the
same mapping). Pools are keyed by credential name (or by the inline settings) and rebuilt when a
credential's material changes.

A script is split into statements (tools/sql.py) and each runs as its own prepared statement, so
every statement can take parameters; the result is the last statement's payload, plus
`statement_count` and the earlier statements' payloads as `command_<i>` when there were several.
`params` is a list bound to `$1..$n` (each statement takes as many as it declares) or a mapping
bound to `:name`. Without
`spec.transaction: true` each statement commits on its own; with it the script runs in one
transaction that an error rolls back. `spec.timeout` (or the task's `timeout`) is the statement
timeout. Errors carry `pg: {sqlstate, message, ...}`; no message ever holds a password.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as dt
import decimal
import hashlib
import re
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias
from urllib.parse import parse_qs, unquote, urlsplit

import asyncpg
import orjson
from asyncpg.pool import PoolConnectionProxy

from noetl_stream.dsl.layering import kind_default
from noetl_stream.jsonutil import JsonObject, JsonValue
from noetl_stream.tools import claims
from noetl_stream.tools.base import Outcome, TaskCall, ToolServices
from noetl_stream.tools.sql import (
    SqlParams,
    bind_named,
    flag,
    postgres_credential,
    read_sql_task,
    rows_payload,
    script_of,
    split_statements,
)

DEFAULT_TIMEOUT_S = float(kind_default("postgres", "timeout"))  # dsl/layering.py: one table
CONNECT_TIMEOUT_S = 10.0
# Connection trouble, serialization failures and deadlocks, resource limits, server shutdown.
RETRYABLE_SQLSTATE_PREFIXES = ("08", "40", "53", "57P")
_NUMBER_AT_END = re.compile(r"(\d+)\s*$")


@dataclass(frozen=True)
class _Target:
    """Where to connect: asyncpg connect arguments, and how to name them without the password."""

    key: str
    fingerprint: str
    source: str  # 'credential "pg_local"' or 'inline connection'
    label: str  # user@host:port/database
    user: str
    database: str
    connect: dict[str, str | int]
    secrets: tuple[str, ...]

    def scrub(self, text: str) -> str:
        for secret in self.secrets:
            if len(secret) >= 4:
                text = text.replace(secret, "***")
            else:  # a short secret is masked only where it stands alone
                text = re.sub(rf"(?<![\w]){re.escape(secret)}(?![\w])", "***", text)
        return text


class _SettingsError(ValueError):
    """Connection settings a user must fix (never holds the password)."""


# A connection lent by a pool (asyncpg's proxy for it).
_Connection: TypeAlias = PoolConnectionProxy
# What a task does on a connection: (connection, target, timeout in seconds) -> its outcome.
_Work = Callable[[_Connection, _Target, float], Awaitable[Outcome]]


def _target(data: str | Mapping[str, Any], key: str, source: str) -> _Target:
    if isinstance(data, Mapping) and data.get("dsn"):
        data = str(data["dsn"])
    if isinstance(data, str):
        return _target_from_dsn(data.strip(), key, source)
    if not isinstance(data, Mapping):
        raise _SettingsError(f"{source} must be a postgresql:// URI or a mapping of host, port, user, "
                             "password, database")
    host = str(data.get("host") or "localhost")
    port = int(data.get("port") or 5432)
    user = str(data.get("user") or data.get("username") or "postgres")
    database = str(data.get("database") or data.get("dbname") or data.get("db") or user)
    password = data.get("password")
    connect: dict[str, str | int] = {"host": host, "port": port, "user": user, "database": database}
    if password is not None:
        connect["password"] = str(password)
    if data.get("sslmode"):
        connect["ssl"] = str(data["sslmode"])
    secrets = (str(password),) if password else ()
    return _Target(key, _fingerprint(connect), source, f"{user}@{host}:{port}/{database}", user,
                   database, connect, secrets)


def _target_from_dsn(dsn: str, key: str, source: str) -> _Target:
    parts = urlsplit(dsn)
    if parts.scheme not in ("postgres", "postgresql"):
        raise _SettingsError(f"{source}: the dsn must be a postgresql:// URI "
                             "(key=value connection strings are not supported)")
    query = parse_qs(parts.query)
    secrets = [unquote(parts.password)] if parts.password else []
    secrets += query.get("password", [])
    try:
        port = parts.port or int(query.get("port", ["5432"])[0])
    except ValueError:
        raise _SettingsError(f"{source}: the dsn has an invalid port") from None
    host = unquote(parts.hostname or "") or query.get("host", ["localhost"])[0]
    user = unquote(parts.username or "") or query.get("user", ["postgres"])[0]
    database = unquote(parts.path.lstrip("/")) or query.get("dbname", [user])[0]
    return _Target(key, _fingerprint({"dsn": dsn}), source, f"{user}@{host}:{port}/{database}",
                   user, database, {"dsn": dsn}, tuple(s for s in secrets if s))


def _fingerprint(settings: Mapping[str, str | int]) -> str:
    return hashlib.sha256(orjson.dumps(settings, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


def _bool(text: str) -> bool:
    word = text.strip().lower()
    if word in ("true", "t", "yes", "y", "on", "1"):
        return True
    if word in ("false", "f", "no", "n", "off", "0"):
        return False
    raise ValueError(text)


def _naive(text: str) -> dt.datetime:
    value = dt.datetime.fromisoformat(text)
    return value.astimezone(dt.UTC).replace(tzinfo=None) if value.tzinfo else value


def _aware(text: str) -> dt.datetime:
    value = dt.datetime.fromisoformat(text)
    return value if value.tzinfo else value.replace(tzinfo=dt.UTC)


def _json_text(text: str) -> JsonValue:
    try:
        value: JsonValue = orjson.loads(text)
    except orjson.JSONDecodeError:
        return text  # not JSON text: store it as a JSON string
    return value


# Playbook values are JSON, so a date or a UUID arrives as a string: parse it for the parameter's
# declared type, since asyncpg wants the Python type. A value that does not parse goes through
# unchanged and asyncpg names the parameter in its error.
_FROM_TEXT: dict[str, Callable[[str], object]] = {
    "int2": int, "int4": int, "int8": int, "oid": int, "float4": float, "float8": float,
    "numeric": decimal.Decimal, "bool": _bool, "date": dt.date.fromisoformat, "timestamp": _naive,
    "timestamptz": _aware, "time": dt.time.fromisoformat, "uuid": uuid.UUID,
    "bytea": lambda text: base64.b64decode(text, validate=True), "json": _json_text,
    "jsonb": _json_text,
}
_TEXT_TYPES = frozenset({"text", "varchar", "bpchar", "name"})
_INT_TYPES = frozenset({"int2", "int4", "int8"})


def _coerce(value: JsonValue, type_name: str) -> object:
    if isinstance(value, str):
        parse = _FROM_TEXT.get(type_name)
        if parse is not None:
            with contextlib.suppress(ValueError, ArithmeticError):
                return parse(value)
        return value
    if isinstance(value, bool):
        return value
    if type_name in _TEXT_TYPES and isinstance(value, (int, float)):
        return str(value)
    if type_name in _TEXT_TYPES and isinstance(value, (dict, list)):
        # `"{{ x | tojson }}"` reads back as the mapping; a text parameter takes its JSON.
        return orjson.dumps(value).decode()
    if type_name == "numeric" and isinstance(value, (int, float)):
        return decimal.Decimal(str(value))
    if type_name in _INT_TYPES and isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _affected_rows(status: str | None) -> int:
    match = _NUMBER_AT_END.search(status or "")
    return int(match.group(1)) if match else 0


async def _init_connection(conn: asyncpg.Connection) -> None:
    for name in ("json", "jsonb"):
        await conn.set_type_codec(name, schema="pg_catalog", format="text",
                                  encoder=lambda v: orjson.dumps(v).decode(), decoder=orjson.loads)


class PostgresTool:
    kind = "postgres"

    def __init__(self, services: ToolServices | None = None, *, max_connections: int = 10) -> None:
        self.services = services or ToolServices()
        self.max_connections = max_connections
        self._pools: dict[str, tuple[str, asyncpg.Pool]] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._retired: set[asyncio.Task[None]] = set()
        self._ledgers: set[str] = set()  # pool fingerprints whose claim ledger is ready

    async def run(self, call: TaskCall) -> Outcome:
        task = read_sql_task("postgres", call.config,
                             params_forms="a list (for $1, $2, ...) or a mapping (for :name)")
        if isinstance(task, Outcome):
            return task
        statements = split_statements(task.script)
        if not statements:
            return Outcome.failure("postgres task's SQL holds no statement", "config")
        transaction = flag(call.spec.get("transaction"), False)
        return await self._on_connection(call, lambda conn, target, timeout_s: self._run_script(
            conn, statements, task.params, target, timeout_s, as_objects=task.as_objects,
            transaction=transaction))

    async def claim(self, call: TaskCall, claim_key: str) -> Outcome:
        """Claim one item of a cursor loop with the SQL in `command`, at most once per
        `claim_key` (tools/claims.py): `{"row": row or None, "replayed": bool}`.
        """
        sql = script_of(call.config)
        statements = split_statements(sql) if sql is not None else []
        if not statements:
            return Outcome.failure("loop.cursor.claim holds no SQL statement", "config")
        return await self._on_connection(
            call, lambda conn, target, timeout_s: self._claim(conn, target, timeout_s, statements,
                                                              claim_key))

    async def _claim(self, conn: _Connection, target: _Target, timeout_s: float, statements: list[str],
                     claim_key: str) -> Outcome:
        try:
            if target.fingerprint not in self._ledgers:
                await claims.prepare_ledger(conn)
                self._ledgers.add(target.fingerprint)
            claimed = await claims.claim_once(conn, statements, claim_key, timeout_s)
        except claims.ClaimShapeError as exc:
            return Outcome.failure(str(exc), "cursor", rows=exc.rows)
        except (asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError) as exc:
            return _statement_failure(exc, len(statements), len(statements), target, timeout_s)
        return Outcome.success({"row": claimed.row, "replayed": claimed.replayed})

    async def run_batches(self, call: TaskCall, setup: Sequence[str], statement: str,
                          rows: Sequence[Sequence[JsonValue]], chunk_size: int) -> Outcome:
        """Run the `setup` statements, then `statement` once per row of arguments, `chunk_size`
        rows per round trip, all in one transaction: an error anywhere rolls back every row and
        the setup. The target is the call's `auth:` or `connection:`, as for `run`.

        Success is `{"rows": <rows written>, "chunks": <round trips>}`; a failure says which
        chunk failed and that nothing was kept.
        """
        chunk_size = max(1, chunk_size)
        return await self._on_connection(call, lambda conn, target, timeout_s: _write_batches(
            conn, setup, statement, rows, chunk_size, target, timeout_s))

    async def _on_connection(self, call: TaskCall, work: _Work) -> Outcome:
        """`work` on a connection from the task's pool, with the task's timeout, the connection
        going back to the pool after; or the failure that says why there is no connection.
        """
        target = await self._resolve(call)
        if isinstance(target, Outcome):
            return target
        try:
            pool = await self._pool(target)
            conn = await pool.acquire(timeout=CONNECT_TIMEOUT_S)
        except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError, TimeoutError) as exc:
            return _connect_failure(exc, target)
        try:
            return await work(conn, target, call.timeout(DEFAULT_TIMEOUT_S))
        finally:
            await pool.release(conn)

    async def _resolve(self, call: TaskCall) -> _Target | Outcome:
        auth = call.config.get("auth")
        connection = call.config.get("connection")
        try:
            if auth:
                name = str(auth.get("credential") or auth.get("name")) if isinstance(auth, Mapping) \
                    else str(auth)
                credential = await postgres_credential(
                    self.services, call, name, kind="postgres",
                    without_store="; give the connection inline in `connection:`")
                if isinstance(credential, Outcome):
                    return credential
                return _target(credential.data, f"credential:{name}", f'credential "{name}"')
            if connection:
                return _target(connection, "inline", "inline connection")
        except _SettingsError as exc:
            return Outcome.failure(str(exc), "config")
        return Outcome.failure("postgres task needs `auth:` (a credential name) or `connection:` "
                               "(a postgresql:// URI or a mapping)", "config")

    async def _pool(self, target: _Target) -> asyncpg.Pool:
        key = target.key if target.key != "inline" else f"inline:{target.fingerprint}"
        current = self._pools.get(key)
        if current is not None and current[0] == target.fingerprint:
            return current[1]
        async with self._locks.setdefault(key, asyncio.Lock()):
            current = self._pools.get(key)
            if current is not None and current[0] == target.fingerprint:
                return current[1]
            pool = await asyncpg.create_pool(
                min_size=1, max_size=self.max_connections, init=_init_connection,
                timeout=CONNECT_TIMEOUT_S, server_settings={"application_name": "noetl-stream"},
                **target.connect)
            self._pools[key] = (target.fingerprint, pool)
            if current is not None:  # the credential changed: let running tasks finish on the old pool
                task = asyncio.create_task(current[1].close())
                self._retired.add(task)
                task.add_done_callback(self._retired.discard)
            return pool

    async def _run_script(self, conn: _Connection, statements: list[str], params: SqlParams,
                          target: _Target,
                          timeout_s: float, *, as_objects: bool, transaction: bool) -> Outcome:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        index = 0
        # The server cancels a statement past the limit; the client-side timeout below also
        # covers time spent waiting on the network. The pool's reset on release undoes the SET.
        await conn.execute(f"SET statement_timeout = {max(1, round(timeout_s * 1000))}")
        tx = conn.transaction() if transaction else None
        try:
            if tx is not None:
                await tx.start()
            payloads: list[JsonObject] = []
            for statement in statements:
                index += 1
                remaining = max(deadline - loop.time(), 0.001)
                payloads.append(await _run_statement(conn, statement, params, remaining,
                                                     as_objects))
            if tx is not None:
                await tx.commit()
        except (asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError) as exc:
            if tx is not None:
                with contextlib.suppress(asyncpg.PostgresError, asyncpg.InterfaceError, OSError,
                                         TimeoutError):
                    await tx.rollback()
            return _statement_failure(exc, index, len(statements), target, timeout_s)
        return Outcome.success(script_payload(payloads))

    async def close(self) -> None:
        pools = [pool for _, pool in self._pools.values()]
        self._pools.clear()
        for pool in pools:
            try:
                await asyncio.wait_for(pool.close(), CONNECT_TIMEOUT_S)
            except TimeoutError:
                pool.terminate()
        if self._retired:
            await asyncio.gather(*self._retired, return_exceptions=True)


def script_payload(payloads: list[JsonObject]) -> JsonObject:
    """A script's result: its last statement's payload; after several statements also
    `statement_count` and the earlier payloads as `command_<i>`, the names NoETL's older engine
    gave every statement (dsl/views.py answers `command_<last>` from the payload itself, so
    the last statement's rows are not stored twice).
    """
    payload = dict(payloads[-1])
    if len(payloads) > 1:
        payload["statement_count"] = len(payloads)
        payload.update({f"command_{i}": earlier for i, earlier in enumerate(payloads[:-1])})
    return payload


async def _run_statement(conn: _Connection, statement: str, params: SqlParams, timeout_s: float,
                         as_objects: bool) -> JsonObject:
    args: list[JsonValue] = []
    if isinstance(params, Mapping):
        statement, args = bind_named(statement, params)
    prepared = await conn.prepare(statement, timeout=timeout_s)
    declared = prepared.get_parameters()
    if isinstance(params, (list, tuple)):
        args = list(params[:len(declared)])
    values: list[object] = [
        *(_coerce(value, ptype.name) for value, ptype in zip(args, declared, strict=False)),
        *args[len(declared):]]
    rows = await prepared.fetch(*values, timeout=timeout_s)
    attributes = prepared.get_attributes()
    if attributes:
        return rows_payload([a.name for a in attributes], [tuple(r) for r in rows],
                            as_objects=as_objects)
    return {"affected_rows": _affected_rows(prepared.get_statusmsg())}


async def _write_batches(conn: _Connection, setup: Sequence[str], statement: str,
                         rows: Sequence[Sequence[JsonValue]], chunk_size: int, target: _Target,
                         timeout_s: float) -> Outcome:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    total = -(-len(rows) // chunk_size)
    chunks = 0
    writing = False
    await conn.execute(f"SET statement_timeout = {max(1, round(timeout_s * 1000))}")
    tx = conn.transaction()
    try:
        await tx.start()
        for sql in setup:
            await conn.execute(sql, timeout=max(deadline - loop.time(), 0.001))
        # No rows, nothing to prepare: the statement may not even have columns to name.
        prepared = await conn.prepare(statement, timeout=max(deadline - loop.time(), 0.001)) \
            if rows else None
        types = [p.name for p in prepared.get_parameters()] if prepared is not None else []
        writing = True
        for start in range(0, len(rows), chunk_size):
            assert prepared is not None
            args = [[_batch_value(v, t) for v, t in zip(row, types, strict=False)]
                    for row in rows[start:start + chunk_size]]
            await prepared.executemany(args, timeout=max(deadline - loop.time(), 0.001))
            chunks += 1
        await tx.commit()
    except (asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError) as exc:
        with contextlib.suppress(asyncpg.PostgresError, asyncpg.InterfaceError, OSError,
                                 TimeoutError):
            await tx.rollback()
        outcome = _statement_failure(exc, 1, 1, target, timeout_s)
        assert outcome.error is not None
        where = f"writing chunk {chunks + 1} of {total}" if writing else "before the first row"
        outcome.error["message"] += f" ({where}; the transaction was rolled back, no row was kept)"
        outcome.error["chunk"] = chunks + 1
        return outcome
    return Outcome.success({"rows": len(rows), "chunks": chunks})


def _batch_value(value: JsonValue, type_name: str) -> object:
    """A row value for a parameter of `type_name`: as `_coerce` makes it, with objects and lists
    sent as JSON text where the column is neither JSON nor an array (`_` starts array types).
    """
    coerced = _coerce(value, type_name)
    if isinstance(coerced, (dict, list)) and type_name not in ("json", "jsonb") \
            and not type_name.startswith("_"):
        return orjson.dumps(coerced).decode()
    return coerced


def _pg_fields(exc: asyncpg.PostgresError, target: _Target) -> dict[str, str]:
    fields: dict[str, str] = {"sqlstate": exc.sqlstate,
                              "message": target.scrub(str(exc.args[0] if exc.args else exc))}
    for name in ("detail", "hint", "position"):
        value = getattr(exc, name, None)
        if value:
            fields[name] = target.scrub(str(value))
    return fields


def _statement_failure(exc: BaseException, index: int, count: int, target: _Target,
                       timeout_s: float) -> Outcome:
    where = f" (statement {index} of {count})" if count > 1 else ""
    sqlstate = getattr(exc, "sqlstate", None)
    if isinstance(exc, TimeoutError) or sqlstate == "57014":
        pg = {"sqlstate": "57014", "message": "canceling statement due to statement timeout"}
        return Outcome.failure(f"postgres statement ran longer than its timeout of {timeout_s:g}s"
                               f"{where}", "timeout", retryable=True, pg=pg, statement=index)
    if isinstance(exc, asyncpg.PostgresError):
        pg = _pg_fields(exc, target)
        retryable = str(sqlstate or "").startswith(RETRYABLE_SQLSTATE_PREFIXES)
        return Outcome.failure(f"postgres: {pg['message']} (SQLSTATE {sqlstate}){where}", "postgres",
                               retryable=retryable, pg=pg, statement=index)
    return Outcome.failure(f"postgres: {target.scrub(str(exc))}{where}", "postgres", statement=index)


def _connect_failure(exc: BaseException, target: _Target) -> Outcome:
    sqlstate = getattr(exc, "sqlstate", None) if isinstance(exc, asyncpg.PostgresError) else None
    retryable = False
    if sqlstate == "28P01":
        reason = (f'password authentication failed for user "{target.user}"; check the user and '
                  f"password in the {target.source}")
    elif sqlstate == "28000":
        reason = f"{exc}; check the user name, and that the server accepts it from this host"
    elif sqlstate == "3D000":
        reason = f'database "{target.database}" does not exist; check the database name'
    elif isinstance(exc, TimeoutError):
        reason = (f"no answer within {CONNECT_TIMEOUT_S:g}s; check the host and port, and that no "
                  "firewall drops the connection")
        retryable = True
    elif isinstance(exc, OSError):
        reason = (f"{exc.strerror or exc}; check the host and port, and that the server is running "
                  "and reachable from this worker")
        retryable = True
    elif isinstance(exc, asyncpg.InterfaceError) and not isinstance(exc, asyncpg.PostgresError):
        reason = f"invalid connection settings: {exc}"
    else:
        reason = str(exc)
        retryable = str(sqlstate or "").startswith(RETRYABLE_SQLSTATE_PREFIXES)
    message = target.scrub(f"postgres: cannot connect to {target.label} ({target.source}): {reason}")
    fields: dict[str, dict[str, str]] = {}
    if isinstance(exc, asyncpg.PostgresError):
        fields["pg"] = _pg_fields(exc, target)
    return Outcome.failure(message, "connection", retryable=retryable, **fields)
