"""`duckdb`: SQL on an embedded DuckDB database, run in a worker thread (never on the event loop).

Unless the task names `db_path`, every step of one execution works on the same database file,
`<NOETL_STREAM_HOME>/duckdb/<execution_id>.duckdb` (a temporary folder when the worker has no
home), so a table one step creates is there for the next. The file stays after the execution;
`db_path: ":memory:"` gives the task a private in-memory database instead.

A script runs statement by statement (DuckDB's own parser splits it); the result follows
tools/sql.py: the last statement's payload, plus `statement_count` when there were several.
`params` is a list (`?`, `$1`) or a mapping (`$name`); each statement takes the ones it names.
`auth:` attaches PostgreSQL credentials through DuckDB's postgres extension. The extension comes
from the `duckdb-ext-postgres` package (a dependency, built for the pinned DuckDB version), so no
download is needed; without that file the tool falls back to DuckDB's own `INSTALL postgres`.
The password goes into a temporary DuckDB secret, never into the ATTACH string, so neither
`duckdb_databases()` nor an error message shows it.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import re
import tempfile
import threading
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol
from urllib.parse import parse_qsl, unquote, urlsplit

import duckdb
import orjson

from noetl_stream.credentials import Credential
from noetl_stream.dsl.layering import kind_default
from noetl_stream.jsonutil import JsonObject, JsonValue
from noetl_stream.tools.base import Outcome, TaskCall, ToolServices
from noetl_stream.tools.sql import (
    SqlParams,
    json_safe,
    postgres_credential,
    read_sql_task,
    rows_payload,
)

DEFAULT_TIMEOUT_S = float(kind_default("duckdb", "timeout"))  # dsl/layering.py: one table
# Statement types whose result set is their answer; any other type that answers with a lone
# `Count` (or `Success`) column reports rows changed, not rows.
_QUERY_TYPES = frozenset({"SELECT", "PRAGMA", "EXPLAIN", "CALL", "RELATION", "EXECUTE", "LOGICAL_PLAN"})
_STATUS_COLUMNS = (["Count"], ["Success"])
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9_.-]")
# The package that ships DuckDB's postgres extension as a file, for one DuckDB version.
EXTENSION_PACKAGE = "duckdb-ext-postgres"
_EXTENSION_FILE = "postgres_scanner.duckdb_extension"
# Credential fields and the libpq keywords they stand for.
_FIELD_KEYWORDS = {"host": "host", "port": "port", "user": "user", "username": "user",
                   "password": "password", "database": "dbname", "dbname": "dbname",
                   "sslmode": "sslmode"}
_KEYWORD_VALUE = re.compile(r"\s*(\w+)\s*=\s*(?:'((?:[^'\\]|\\.)*)'|((?:[^\s'\\]|\\.)+))\s*")


def _quote_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _quote_ident(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


class _DsnError(ValueError):
    """A connection string that cannot be read (the message never holds the string)."""


def _libpq_params(data: Mapping[str, JsonValue]) -> dict[str, str]:
    """The credential as libpq keywords: its `dsn` (URI or key=value) or its separate fields."""
    dsn = str(data.get("dsn") or "").strip()
    if not dsn:
        return {_FIELD_KEYWORDS[k]: str(v) for k, v in data.items()
                if k in _FIELD_KEYWORDS and v is not None and str(v) != ""}
    if dsn.startswith(("postgres://", "postgresql://")):
        return _uri_params(dsn)
    params: dict[str, str] = {}
    position = 0
    while position < len(dsn):
        match = _KEYWORD_VALUE.match(dsn, position)
        if match is None:
            raise _DsnError("the dsn is neither a postgresql:// URI nor a key=value connection string")
        value = match.group(2) if match.group(2) is not None else match.group(3)
        params[match.group(1)] = re.sub(r"\\(.)", r"\1", value)
        position = match.end()
    return params


def _uri_params(dsn: str) -> dict[str, str]:
    try:
        parts = urlsplit(dsn)
        port = parts.port
    except ValueError:
        raise _DsnError("the dsn is not a valid postgresql:// URI") from None
    params: dict[str, str] = {}
    if parts.hostname:
        params["host"] = unquote(parts.hostname)
    if port:
        params["port"] = str(port)
    if parts.username:
        params["user"] = unquote(parts.username)
    if parts.password:
        params["password"] = unquote(parts.password)
    if parts.path.strip("/"):
        params["dbname"] = unquote(parts.path.lstrip("/"))
    params.update(parse_qsl(parts.query))
    return params


def _conninfo(params: Mapping[str, str]) -> str:
    """A key=value connection string for ATTACH, with every value quoted for libpq."""
    return " ".join(f"{key}='{_conninfo_escape(value)}'" for key, value in params.items())


def _conninfo_escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("'", "\\'")


def _secrets(data: Mapping[str, JsonValue]) -> list[str]:
    """Every form of the password the credential holds, to mask wherever text leaves the tool."""
    found = [str(data["password"])] if data.get("password") else []
    try:
        password = _libpq_params(data).get("password")
    except _DsnError:
        password = None
    if password:
        found.append(password)
    if data.get("dsn"):
        found.append(str(data["dsn"]))
    return [s for s in found if s]


def _packaged_extension(platform: str) -> Path | None:
    """postgres_scanner from the duckdb-ext-postgres package, if built for this DuckDB and platform."""
    try:
        spec = importlib.util.find_spec("duckdb_ext")
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    for folder in spec.submodule_search_locations or []:
        candidate = Path(folder) / "extensions" / f"v{duckdb.__version__}" / platform / _EXTENSION_FILE
        if candidate.is_file():
            return candidate
    return None


def _load_postgres_extension(con: duckdb.DuckDBPyConnection) -> str | None:
    """Load DuckDB's postgres extension; None when loaded, else why it could not be."""
    row = con.execute("PRAGMA platform").fetchone()
    platform = str(row[0]) if row else "unknown"
    packaged = _packaged_extension(platform)
    if packaged is None:
        reason = (f"the {EXTENSION_PACKAGE} package is not installed or has no build for DuckDB "
                  f"{duckdb.__version__} on {platform}")
    else:
        try:
            con.execute(f"LOAD {_quote_literal(str(packaged))}")
            return None
        except duckdb.Error as exc:
            reason = f"{packaged} did not load ({_first_line(exc)})"
    try:
        con.execute("INSTALL postgres")
        con.execute("LOAD postgres")
        return None
    except duckdb.Error as exc:
        return f"{reason}, and DuckDB could not install it either ({_first_line(exc)})"


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


class _OnConnection:
    """Work on one DuckDB connection, done in a thread; `interrupt` stops it from the event loop."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._con: duckdb.DuckDBPyConnection | None = None
        self._stopped = False

    def interrupt(self) -> None:
        with self._lock:
            self._stopped = True
            if self._con is not None:
                self._con.interrupt()

    def run(self) -> Outcome:
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        try:
            con = duckdb.connect(self.path)
        except duckdb.Error as exc:
            return Outcome.failure(f"duckdb: cannot open {self.path}: {exc}", "duckdb",
                                   retryable="lock" in str(exc).lower(),
                                   exception_type=type(exc).__name__)
        with self._lock:
            self._con = con
        try:
            return self._work(con)
        finally:
            with self._lock:
                self._con = None
            con.close()

    def _work(self, con: duckdb.DuckDBPyConnection) -> Outcome:
        raise NotImplementedError


class _Job(_OnConnection):
    """One task's work, done in a thread; `interrupt` stops it from the event loop."""

    def __init__(self, path: str, script: str, params: SqlParams, attach: list[tuple[str, Credential]],
                 as_objects: bool) -> None:
        super().__init__(path)
        self.script = script
        self.params = params
        self.attach = attach
        self.as_objects = as_objects
        self.secrets: list[str] = []

    def scrub(self, text: str) -> str:
        for secret in sorted(set(self.secrets), key=len, reverse=True):
            if len(secret) >= 4:
                text = text.replace(secret, "***")
            else:  # a short secret is masked only where it stands alone
                text = re.sub(rf"(?<![\w]){re.escape(secret)}(?![\w])", "***", text)
        return text

    def _work(self, con: duckdb.DuckDBPyConnection) -> Outcome:
        failure = self._attach(con)
        if failure is not None:
            return failure
        return self._run_statements(con)

    def _attach(self, con: duckdb.DuckDBPyConnection) -> Outcome | None:
        if not self.attach:
            return None
        for _, credential in self.attach:
            self.secrets += _secrets(credential.data)
        problem = _load_postgres_extension(con)
        if problem is not None:
            names = ", ".join(f'"{c.name}"' for _, c in self.attach)
            return Outcome.failure(self.scrub(
                f"duckdb: attaching postgres credential {names} needs DuckDB's postgres extension: "
                f"{problem}. Install the {EXTENSION_PACKAGE} package that matches DuckDB "
                f"{duckdb.__version__} (pip install '{EXTENSION_PACKAGE}=={duckdb.__version__}.*'), or "
                f"run `INSTALL postgres;` once with DuckDB {duckdb.__version__} where "
                "extensions.duckdb.org is reachable"), "extension")
        for alias, credential in self.attach:
            failure = self._attach_one(con, alias, credential)
            if failure is not None:
                return failure
        return None

    def _attach_one(self, con: duckdb.DuckDBPyConnection, alias: str,
                    credential: Credential) -> Outcome | None:
        where = f'credential "{credential.name}" as "{alias}"'
        try:
            params = _libpq_params(credential.data)
        except _DsnError as exc:
            return Outcome.failure(f"duckdb: cannot attach {where}: {exc}", "credential")
        password = params.pop("password", None)
        options = "TYPE postgres"
        try:
            if password:
                # The password lives in a temporary secret (shown redacted), not in the ATTACH string
                # that duckdb_databases() and DuckDB's connection errors repeat.
                secret = f"noetl_attach_{uuid.uuid4().hex}"
                con.execute(f"CREATE TEMPORARY SECRET {secret} "
                            f"(TYPE postgres, PASSWORD {_quote_literal(password)})")
                options += f", SECRET {secret}"
            # IF NOT EXISTS: a concurrent step of the same execution may share this database instance
            # and have attached the alias already.
            con.execute(f"ATTACH IF NOT EXISTS {_quote_literal(_conninfo(params))} AS "
                        f"{_quote_ident(alias)} ({options})")
        except duckdb.Error as exc:
            message = self.scrub(f"duckdb: cannot attach {where}: {str(exc).strip()}")
            return Outcome.failure(message, "connection", retryable=True,
                                   exception_type=type(exc).__name__)
        return None

    def _run_statements(self, con: duckdb.DuckDBPyConnection) -> Outcome:
        index = 0
        statements: list[duckdb.Statement] = []
        try:
            statements = con.extract_statements(self.script)
            if not statements:
                return Outcome.failure("duckdb task's SQL holds no statement", "config")
            payload: JsonObject = {}
            for statement in statements:
                index += 1
                if self._stopped:
                    return Outcome.failure("duckdb task was interrupted", "timeout", retryable=True)
                cursor = con.execute(statement.query, self._args(statement.named_parameters))
                payload = self._payload(statement.type.name, cursor)
        except duckdb.Error as exc:
            where = f" (statement {index} of {len(statements)})" if index and len(statements) > 1 else ""
            return Outcome.failure(self.scrub(f"duckdb: {exc}{where}"), "duckdb",
                                   exception_type=type(exc).__name__, statement=index or None)
        if len(statements) > 1:
            payload["statement_count"] = len(statements)
        return Outcome.success(payload)

    def _args(self, names: set[str]) -> JsonObject | list[JsonValue] | None:
        if not names or self.params is None:
            return None
        if isinstance(self.params, Mapping):
            return {name: self.params[name] for name in names if name in self.params}
        positions = [int(n) for n in names if n.isdigit()]
        return list(self.params[:max(positions)]) if positions else None

    def _payload(self, statement_type: str, cursor: duckdb.DuckDBPyConnection) -> JsonObject:
        description = cursor.description or []
        columns = [d[0] for d in description]
        rows = cursor.fetchall()
        if statement_type not in _QUERY_TYPES and (not columns or columns in _STATUS_COLUMNS):
            count = rows[0][0] if rows and columns == ["Count"] else 0
            return {"affected_rows": int(count)}
        json_columns = [i for i, d in enumerate(description) if str(d[1]) == "JSON"]
        if json_columns:
            rows = [tuple(_parse_json(v) if i in json_columns else v for i, v in enumerate(row))
                    for row in rows]
        return rows_payload(columns, rows, as_objects=self.as_objects)


class _BatchJob(_OnConnection):
    """Rows written with one statement in one transaction, in a thread; `interrupt` stops it."""

    def __init__(self, path: str, setup: Sequence[str], statement: str,
                 rows: Sequence[Sequence[JsonValue]], chunk_size: int) -> None:
        super().__init__(path)
        self.setup = setup
        self.statement = statement
        self.rows = rows
        self.chunk_size = chunk_size

    def _work(self, con: duckdb.DuckDBPyConnection) -> Outcome:
        return self._write(con)

    def _write(self, con: duckdb.DuckDBPyConnection) -> Outcome:
        total = -(-len(self.rows) // self.chunk_size)
        chunks = 0
        writing = False
        try:
            con.execute("BEGIN TRANSACTION")
            for sql in self.setup:
                con.execute(sql)
            writing = True
            for start in range(0, len(self.rows), self.chunk_size):
                chunk = [[_batch_value(v) for v in row]
                         for row in self.rows[start:start + self.chunk_size]]
                con.executemany(self.statement, chunk)
                chunks += 1
            con.execute("COMMIT")
        except duckdb.Error as exc:
            with contextlib.suppress(duckdb.Error):
                con.execute("ROLLBACK")
            where = f"writing chunk {chunks + 1} of {total}" if writing else "before the first row"
            return Outcome.failure(f"duckdb: {_first_line(exc)} ({where}; the transaction was "
                                   "rolled back, no row was kept)", "duckdb",
                                   exception_type=type(exc).__name__, chunk=chunks + 1)
        return Outcome.success({"rows": len(self.rows), "chunks": chunks})


def _batch_value(value: JsonValue) -> JsonValue:
    """A row value as DuckDB takes it: objects and lists go as JSON text, which DuckDB casts to a
    JSON, STRUCT or LIST column, rather than as Python containers it would guess a type for.
    """
    if isinstance(value, (dict, list)):
        return orjson.dumps(value).decode()
    return value


def _parse_json(value: object) -> JsonValue:
    if not isinstance(value, str):
        return json_safe(value)
    try:
        parsed: JsonValue = orjson.loads(value)
    except orjson.JSONDecodeError:
        return value
    return parsed


class DuckdbTool:
    kind = "duckdb"

    def __init__(self, services: ToolServices | None = None) -> None:
        self.services = services or ToolServices()

    def db_path(self, call: TaskCall) -> str:
        """The database a task works on: `db_path`, else the execution's own file."""
        configured = call.config.get("db_path")
        if configured:
            text = str(configured)
            return text if text == ":memory:" else str(Path(text).expanduser())
        home = self.services.home
        base = Path(home) if home else Path(tempfile.gettempdir()) / "noetl-stream"
        return str(base / "duckdb" / f"{_UNSAFE_NAME.sub('_', call.execution_id)}.duckdb")

    async def run(self, call: TaskCall) -> Outcome:
        task = read_sql_task("duckdb", call.config,
                             params_forms="a list (for ? or $1) or a mapping (for $name)")
        if isinstance(task, Outcome):
            return task
        attach = await self._credentials(call)
        if isinstance(attach, Outcome):
            return attach
        job = _Job(self.db_path(call), task.script, task.params, attach, task.as_objects)
        return await _run_job(job, call.timeout(DEFAULT_TIMEOUT_S))

    async def run_batches(self, call: TaskCall, setup: Sequence[str], statement: str,
                          rows: Sequence[Sequence[JsonValue]], chunk_size: int) -> Outcome:
        """Run the `setup` statements, then `statement` once per row of arguments, `chunk_size`
        rows at a time, in one transaction on the call's database (`db_path`, as for `run`): an
        error anywhere rolls back every row and the setup.

        Success is `{"rows": <rows written>, "chunks": <chunks>}`.
        """
        job = _BatchJob(self.db_path(call), setup, statement, rows, max(1, chunk_size))
        return await _run_job(job, call.timeout(DEFAULT_TIMEOUT_S))

    async def _credentials(self, call: TaskCall) -> list[tuple[str, Credential]] | Outcome:
        auth = call.config.get("auth")
        if not auth:
            return []
        if isinstance(auth, Mapping):
            wanted = [(str(alias), str(name)) for alias, name in auth.items()]
        elif isinstance(auth, (list, tuple)):
            wanted = [(str(name), str(name)) for name in auth]
        else:
            wanted = [(str(auth), str(auth))]
        found: list[tuple[str, Credential]] = []
        for alias, name in wanted:
            credential = await postgres_credential(self.services, call, name, kind="duckdb")
            if isinstance(credential, Outcome):
                return credential
            found.append((alias, credential))
        return found

    async def close(self) -> None:
        return None


class _Interruptible(Protocol):
    def run(self) -> Outcome: ...

    def interrupt(self) -> None: ...


async def _run_job(job: _Interruptible, timeout_s: float) -> Outcome:
    """Run `job` in a worker thread, interrupting it past `timeout_s` or when the task is cancelled."""
    work = asyncio.ensure_future(asyncio.to_thread(job.run))
    try:
        return await asyncio.wait_for(asyncio.shield(work), timeout_s)
    except TimeoutError:
        job.interrupt()
        await work  # the thread stops at the interrupt; its connection is closed before we go on
        return Outcome.failure(f"duckdb statement ran longer than its timeout of {timeout_s:g}s",
                               "timeout", retryable=True)
    except asyncio.CancelledError:
        job.interrupt()
        raise
