"""`duckdb`: SQL on an embedded DuckDB database, run in a worker thread (never on the event loop).

Unless the task names `db_path`, every step of one execution works on the same database file,
`<NOETL_STREAM_HOME>/duckdb/<execution_id>.duckdb` (a temporary folder when the worker has no
home), so a table one step creates is there for the next. The file stays after the execution;
`db_path: ":memory:"` gives the task a private in-memory database instead.

A script runs statement by statement (DuckDB's own parser splits it); the result follows
tools/sql.py: the last statement's payload, plus `statement_count` when there were several.
`params` is a list (`?`, `$1`) or a mapping (`$name`); each statement takes the ones it names.
`auth:` attaches PostgreSQL credentials through DuckDB's postgres extension, which DuckDB
downloads on first use; where that is impossible the task fails and says how to install it.
"""

from __future__ import annotations

import asyncio
import re
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import duckdb
import orjson

from noetl_stream.errors import NoetlStreamError
from noetl_stream.tools.base import Credential, Outcome, TaskCall, ToolServices
from noetl_stream.tools.sql import flag, json_safe, rows_payload, script_of

DEFAULT_TIMEOUT_S = 300.0
POSTGRES_KINDS = frozenset({"postgres", "postgresql"})
# Statement types whose result set is their answer; any other type that answers with a lone
# `Count` (or `Success`) column reports rows changed, not rows.
_QUERY_TYPES = frozenset({"SELECT", "PRAGMA", "EXPLAIN", "CALL", "RELATION", "EXECUTE", "LOGICAL_PLAN"})
_STATUS_COLUMNS = (["Count"], ["Success"])
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9_.-]")


def _quote_literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _quote_ident(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


def _conninfo(data: Mapping[str, Any]) -> str:
    """The libpq connection text for DuckDB's ATTACH: the `dsn` as given, or key=value pairs."""
    if data.get("dsn"):
        return str(data["dsn"])
    keys = {"host": "host", "port": "port", "user": "user", "username": "user",
            "password": "password", "database": "dbname", "dbname": "dbname", "sslmode": "sslmode"}
    return " ".join(f"{keys[k]}={_conninfo_value(v)}" for k, v in data.items()
                    if k in keys and v is not None)


def _conninfo_value(value: Any) -> str:
    escaped = str(value).replace("\\", "\\\\").replace("'", "\\'")
    return f"'{escaped}'"


def _secrets(data: Mapping[str, Any]) -> list[str]:
    found = [str(data["password"])] if data.get("password") else []
    dsn = str(data.get("dsn") or "")
    if dsn:
        try:
            password = urlsplit(dsn).password
        except ValueError:
            password = None
        if password:
            found.append(unquote(password))
        found += re.findall(r"password\s*=\s*'?([^'\s&]+)", dsn)
    return [s for s in found if s]


class _Job:
    """One task's work, done in a thread; `interrupt` stops it from the event loop."""

    def __init__(self, path: str, script: str, params: Any, attach: list[tuple[str, Credential]],
                 as_objects: bool) -> None:
        self.path = path
        self.script = script
        self.params = params
        self.attach = attach
        self.as_objects = as_objects
        self.secrets: list[str] = []
        self._lock = threading.Lock()
        self._con: duckdb.DuckDBPyConnection | None = None
        self._stopped = False

    def interrupt(self) -> None:
        with self._lock:
            self._stopped = True
            if self._con is not None:
                self._con.interrupt()

    def scrub(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, "***")
        return text

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
            failure = self._attach(con)
            if failure is not None:
                return failure
            return self._run_statements(con)
        finally:
            with self._lock:
                self._con = None
            con.close()

    def _attach(self, con: duckdb.DuckDBPyConnection) -> Outcome | None:
        if not self.attach:
            return None
        try:
            con.execute("LOAD postgres")
        except duckdb.Error as exc:
            names = ", ".join(f'"{c.name}"' for _, c in self.attach)
            return Outcome.failure(
                f"duckdb: attaching postgres credential {names} needs DuckDB's postgres extension, "
                f"which is not installed and could not be installed ({str(exc).splitlines()[0]}). "
                f"Install it once where extensions.duckdb.org is reachable (run `INSTALL postgres;` "
                f"with DuckDB {duckdb.__version__}), or put postgres_scanner.duckdb_extension for "
                "this DuckDB version and platform into ~/.duckdb/extensions/", "extension")
        for alias, credential in self.attach:
            self.secrets += _secrets(credential.data)
            try:
                con.execute(f"ATTACH {_quote_literal(_conninfo(credential.data))} AS "
                            f"{_quote_ident(alias)} (TYPE postgres)")
            except duckdb.Error as exc:
                return Outcome.failure(self.scrub(f'duckdb: cannot attach credential "{credential.name}" '
                                                  f'as "{alias}": {exc}'), "connection",
                                       retryable=True, exception_type=type(exc).__name__)
        return None

    def _run_statements(self, con: duckdb.DuckDBPyConnection) -> Outcome:
        index = 0
        statements: list[Any] = []
        try:
            statements = con.extract_statements(self.script)
            if not statements:
                return Outcome.failure("duckdb task's SQL holds no statement", "config")
            payload: dict[str, Any] = {}
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

    def _args(self, names: set[str]) -> Any:
        if not names or self.params is None:
            return None
        if isinstance(self.params, Mapping):
            return {name: self.params[name] for name in names if name in self.params}
        positions = [int(n) for n in names if n.isdigit()]
        return list(self.params[:max(positions)]) if positions else None

    def _payload(self, statement_type: str, cursor: duckdb.DuckDBPyConnection) -> dict[str, Any]:
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


def _parse_json(value: Any) -> Any:
    if not isinstance(value, str):
        return json_safe(value)
    try:
        return orjson.loads(value)
    except orjson.JSONDecodeError:
        return value


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
        cfg = call.config
        script = script_of(cfg)
        if script is None:
            return Outcome.failure("duckdb task has no SQL in `command:` or `query:`", "config")
        params = cfg.get("params")
        if params is not None and not isinstance(params, (list, tuple, Mapping)):
            return Outcome.failure("duckdb `params` must be a list (for ? or $1) or a mapping "
                                   "(for $name)", "config")
        attach = await self._credentials(call)
        if isinstance(attach, Outcome):
            return attach
        timeout_s = float(cfg.get("timeout") or call.spec.get("timeout") or call.timeout_s
                          or DEFAULT_TIMEOUT_S)
        job = _Job(self.db_path(call), script, params, attach, flag(cfg.get("as_objects"), True))
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
        resolver = self.services.credentials
        if resolver is None:
            return Outcome.failure("duckdb task names credentials in `auth:`, but this worker has no "
                                   "credential store", "credential")
        found: list[tuple[str, Credential]] = []
        for alias, name in wanted:
            try:
                credential = await resolver.resolve(name, execution_id=call.execution_id)
            except NoetlStreamError as exc:
                return Outcome.failure(str(exc), "credential")
            if credential.kind not in POSTGRES_KINDS:
                return Outcome.failure(f'credential "{name}" is of kind "{credential.kind}"; duckdb '
                                       'attaches credentials of kind "postgres" only', "credential")
            found.append((alias, credential))
        return found

    async def close(self) -> None:
        return None
