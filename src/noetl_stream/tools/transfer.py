"""`transfer`: read rows from a source (an HTTP API, a PostgreSQL or DuckDB query) and write them
into a PostgreSQL or DuckDB table, column by column as `target.mapping` says.

Each side goes through the kind it names, so credentials, connections, timeouts and error shapes
are those of the `http`, `postgres` and `duckdb` tools. The whole write is one transaction: a
failure in any chunk rolls back every row of the transfer (and a `replace` mode's emptying), so
a failed step never leaves part of its rows behind. The settings are read and checked by
dsl/transfer.py; docs/tools.md says where NoETL's engines differ and what this tool does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from noetl_stream.dsl import transfer
from noetl_stream.dsl.transfer import Endpoint, Plan
from noetl_stream.jsonutil import JsonObject, JsonValue
from noetl_stream.tools.base import Outcome, TaskCall, ToolServices
from noetl_stream.tools.extras import duckdb_tool
from noetl_stream.tools.http import HttpTool
from noetl_stream.tools.postgres import PostgresTool


class _DataError(ValueError):
    """Rows from the source that cannot be written as asked."""


@dataclasses.dataclass(frozen=True)
class _Rows:
    records: list[Mapping[str, JsonValue]]
    columns: list[str] | None  # a query's columns; None for an HTTP body


class TransferTool:
    kind = "transfer"

    def __init__(self, services: ToolServices | None = None) -> None:
        self.services = services or ToolServices()
        self.http = HttpTool(self.services)
        self.postgres = PostgresTool(self.services)
        self.duckdb = duckdb_tool(self.services)  # a stand-in without the [duckdb] extra

    async def run(self, call: TaskCall) -> Outcome:
        found = transfer.problems(call.config, rendered=True)
        if found:
            return Outcome.failure("; ".join(f"tool.{'.'.join(p.path)}: {p.message}" for p in found),
                                   "config")
        plan = transfer.read_plan(call.config)
        read = await self._read(call, plan.source)
        if isinstance(read, Outcome):
            return read
        try:
            columns, fields = columns_and_fields(plan.mapping, read)
            rows = [[field_value(record, name) for name in fields] for record in read.records]
        except _DataError as exc:
            return Outcome.failure(f"transfer: {exc}", "data")
        setup, statement = write_statements(plan, columns)
        target = dataclasses.replace(call, kind=plan.target.type,
                                     config=_target_config(plan.target))
        writer = self.postgres if plan.target.type == "postgres" else self.duckdb
        written = await writer.run_batches(target, setup, statement, rows, plan.chunk_size)
        if not written.ok:
            return _prefixed(written, f"transfer target {plan.target.type} "
                                      f"{plan.target.get('table') or '(query)'}")
        counts = written.result if isinstance(written.result, Mapping) else {}  # {rows, chunks}
        return Outcome.success(result_of(plan, columns, len(read.records), counts))

    async def _read(self, call: TaskCall, source: Endpoint) -> _Rows | Outcome:
        sub = dataclasses.replace(call, kind=source.type, config=_source_config(source))
        where = f"transfer source {source.type}"
        if source.type == "http":
            outcome = await self.http.run(sub)
            if not outcome.ok:
                return _prefixed(outcome, where)
            try:
                return _Rows(records_of(outcome.result, source.get("data_path")), None)
            except _DataError as exc:
                return Outcome.failure(f"{where}: {exc}", "data")
        tool = self.postgres if source.type == "postgres" else self.duckdb
        outcome = await tool.run(sub)
        if not outcome.ok:
            return _prefixed(outcome, where)
        payload = outcome.result
        if not isinstance(payload, Mapping) or "columns" not in payload:
            return Outcome.failure(f"{where}: the query returned no rows (its last statement "
                                   "must be one that reads rows, such as SELECT)", "data")
        return _Rows(list(payload["rows"]), list(payload["columns"]))

    async def close(self) -> None:
        await self.http.close()
        await self.postgres.close()
        await self.duckdb.close()


def _source_config(source: Endpoint) -> dict[str, object]:
    if source.type == "http":
        keys = {"url": "url", "method": "method", "headers": "headers", "auth": "auth"}
    elif source.type == "postgres":
        keys = {"query": "query", "auth": "auth", "connection": "connection"}
    else:
        keys = {"query": "query", "auth": "auth", "db_path": "db_path"}
    return {name: source.get(key) for name, key in keys.items() if source.get(key) is not None}


def _target_config(target: Endpoint) -> dict[str, object]:
    keys = ("auth", "connection") if target.type == "postgres" else ("db_path",)
    return {key: target.get(key) for key in keys if target.get(key) is not None}


def _prefixed(outcome: Outcome, where: str) -> Outcome:
    """The failure of one side, its message saying which side failed."""
    error = dict(outcome.error or {})
    error["message"] = f"{where}: {error.get('message', 'failed')}"
    return dataclasses.replace(outcome, error=error)


def records_of(body: object, data_path: object) -> list[Mapping[str, JsonValue]]:
    """The rows of an HTTP body: the list at `data_path` (dot-separated keys), or the body itself;
    a lone object is one row.
    """
    data = body
    if data_path:
        for key in str(data_path).split("."):
            if not isinstance(data, Mapping) or key not in data:
                raise _DataError(f'data_path "{data_path}": the response has no "{key}" there')
            data = data[key]
    if isinstance(data, Mapping):
        return [data]
    if not isinstance(data, list):
        raise _DataError(f"the response{' at data_path' if data_path else ''} is "
                         f"{type(data).__name__}, not a list of objects")
    records: list[Mapping[str, JsonValue]] = []
    for index, record in enumerate(data):
        if not isinstance(record, Mapping):
            raise _DataError(f"row {index} of the response is {type(record).__name__}, not an "
                             "object")
        records.append(record)
    return records


def field_value(record: Mapping[str, JsonValue], name: str) -> JsonValue:
    """`record[name]`, else the value at a dotted path (`address.city`); None when absent."""
    if name in record:
        return record[name]
    first, *rest = name.split(".")
    value = record.get(first)
    for key in rest:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value


def _has_field(record: Mapping[str, JsonValue], name: str) -> bool:
    if name in record:
        return True
    value: JsonValue | Mapping[str, JsonValue] = record
    for key in name.split("."):
        if not isinstance(value, Mapping) or key not in value:
            return False
        value = value[key]
    return True


def columns_and_fields(mapping: dict[str, str] | None, rows: _Rows) -> tuple[list[str], list[str]]:
    """Target columns and the source field each reads. Without a mapping, every source column
    (or every key the HTTP rows hold, in order of first appearance) lands in a column of its name.

    A mapped field that no row holds is taken for a misspelling and refused: writing NULL into
    every row would look like a transfer that worked.
    """
    if mapping is None:
        names = rows.columns if rows.columns is not None else _keys(rows.records)
        return list(names), list(names)
    if rows.records:
        for column, name in mapping.items():
            if not any(_has_field(record, name) for record in rows.records):
                held = ", ".join(_keys(rows.records)[:20])
                raise _DataError(f'mapping "{column}: {name}": no source row has a field "{name}" '
                                 f"(the rows hold {held})")
    return list(mapping), list(mapping.values())


def _keys(records: Sequence[Mapping[str, JsonValue]]) -> list[str]:
    return list(dict.fromkeys(str(k) for record in records for k in record))


def quote_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def write_statements(plan: Plan, columns: list[str]) -> tuple[list[str], str]:
    """(statements run first, the statement run once per row) for the plan's target.

    The table name is written as the playbook gives it (`schema.table`, quoted or not); column
    names are quoted, so they are taken exactly as spelled.
    """
    target = plan.target
    table = target.get("table")
    setup: list[str] = []
    if table and plan.mode == "replace":
        # Both empty the table inside the write's transaction; DuckDB's TRUNCATE is a DELETE too.
        setup.append(f"TRUNCATE TABLE {table}" if target.type == "postgres"
                     else f"DELETE FROM {table}")
    custom = target.get("query")
    if custom:
        return setup, str(custom)
    names = ", ".join(quote_ident(c) for c in columns)
    marks = ", ".join(f"${i}" if target.type == "postgres" else "?"
                      for i in range(1, len(columns) + 1))
    statement = f"INSERT INTO {table} ({names}) VALUES ({marks})"
    if plan.mode == "upsert" and columns:
        key, rest = quote_ident(columns[0]), columns[1:]
        action = ("DO UPDATE SET " + ", ".join(f"{quote_ident(c)} = EXCLUDED.{quote_ident(c)}"
                                               for c in rest)) if rest else "DO NOTHING"
        statement += f" ON CONFLICT ({key}) {action}"
    return setup, statement


def result_of(plan: Plan, columns: list[str], fetched: int,
              written: Mapping[str, int]) -> JsonObject:
    """The result under the names NoETL's engines give it; `written` is the writer's
    `{rows, chunks}`.
    """
    table = plan.target.get("table")
    return {
        "direction": f"{plan.source.type}_to_{plan.target.type}",
        "source_type": plan.source.type,
        "target_type": plan.target.type,
        "mode": "custom" if plan.target.get("query") else plan.mode,
        "rows_transferred": int(written["rows"]),
        "chunks_processed": int(written["chunks"]),
        "records_fetched": fetched,
        "target_table": str(table) if table else "custom_query",
        "columns": list(columns),
    }
