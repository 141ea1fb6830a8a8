"""What the SQL tool kinds share: reading a task's SQL, `params` and `as_objects`, resolving
the PostgreSQL credentials it names, splitting a PostgreSQL script into statements, `:name`
parameters, JSON-safe values and the result shape (docs/tools.md).

Results are `{columns, rows, row_count}` for a statement that returns rows (rows as objects, or
as lists with `as_objects: false`) and `{affected_rows}` for one that does not; a script of
several statements gives its last statement's payload plus `statement_count`.

Values become JSON: a Decimal is an int when whole, a float when the float reads back as the
same number, otherwise a string (no silent rounding); dates and times are ISO 8601 strings;
intervals are seconds (float); UUIDs and network addresses are strings; bytes are base64.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import ipaddress
import re
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeAlias

from noetl_stream.credentials import Credential
from noetl_stream.errors import NoetlStreamError
from noetl_stream.jsonutil import JsonObject, JsonValue
from noetl_stream.tools.base import Outcome, TaskCall, ToolServices

# The credential kinds a SQL kind connects to PostgreSQL with.
POSTGRES_CREDENTIAL_KINDS = frozenset({"postgres", "postgresql"})

_DOLLAR_TAG = re.compile(r"\$([A-Za-z_\x80-\uffff][A-Za-z_0-9\x80-\uffff]*)?\$")
_NAMED_PARAM = re.compile(r"(?<!:):([A-Za-z_][A-Za-z_0-9]*)")
_IDENT_CHAR = re.compile(r"[A-Za-z_0-9$\x80-\uffff]")


def _spans(sql: str) -> Iterator[tuple[int, int, bool]]:
    """(start, end, is_code) spans: code outside of string literals, quoted names and comments."""
    i = start = 0
    n = len(sql)
    while i < n:
        c = sql[i]
        nxt = sql[i + 1] if i + 1 < n else ""
        end = -1
        if c == "'":
            escapes = i > 0 and sql[i - 1] in "eE" and (i < 2 or not _IDENT_CHAR.match(sql[i - 2]))
            end = _quoted_end(sql, i, "'", backslash=escapes)
        elif c == '"':
            end = _quoted_end(sql, i, '"', backslash=False)
        elif c == "-" and nxt == "-":
            newline = sql.find("\n", i)
            end = n if newline < 0 else newline
        elif c == "/" and nxt == "*":
            end = _block_comment_end(sql, i)
        elif c == "$" and (i == 0 or not _IDENT_CHAR.match(sql[i - 1])):
            tag = _DOLLAR_TAG.match(sql, i)
            if tag is not None:
                close = sql.find(tag.group(0), tag.end())
                end = n if close < 0 else close + len(tag.group(0))
        if end < 0:
            i += 1
            continue
        if start < i:
            yield start, i, True
        yield i, end, False
        i = start = end
    if start < n:
        yield start, n, True


def _quoted_end(sql: str, i: int, quote: str, *, backslash: bool) -> int:
    j = i + 1
    n = len(sql)
    while j < n:
        if backslash and sql[j] == "\\":
            j += 2
            continue
        if sql[j] == quote:
            if j + 1 < n and sql[j + 1] == quote:  # a doubled quote stands for itself
                j += 2
                continue
            return j + 1
        j += 1
    return n


def _block_comment_end(sql: str, i: int) -> int:
    depth = 0  # PostgreSQL block comments nest
    j = i
    n = len(sql)
    while j < n:
        if sql.startswith("/*", j):
            depth += 1
            j += 2
        elif sql.startswith("*/", j):
            depth -= 1
            j += 2
            if depth == 0:
                return j
        else:
            j += 1
    return n


def split_statements(script: str) -> list[str]:
    """The statements of a PostgreSQL script, split at semicolons outside literals and comments.

    Statements holding only whitespace or comments are dropped. A semicolon inside a
    `BEGIN ATOMIC ... END` function body is not recognised: quote such bodies with `$$`.
    """
    statements: list[str] = []
    current: list[str] = []
    has_code = False
    for start, end, is_code in _spans(script):
        text = script[start:end]
        if not is_code:
            current.append(text)
            continue
        pieces = text.split(";")
        for index, piece in enumerate(pieces):
            if index > 0:
                if has_code:
                    statements.append("".join(current).strip())
                current, has_code = [], False
            current.append(piece)
            has_code = has_code or bool(piece.strip())
    if has_code:
        statements.append("".join(current).strip())
    return statements


def bind_named(statement: str, params: Mapping[str, JsonValue]) -> tuple[str, list[JsonValue]]:
    """Rewrite `:name` placeholders (names found in `params`) to `$1..$n` with their values.

    Only code is rewritten, so `'a:b'`, `"x:y"`, comments and `::casts` stay as they are; a
    `:name` that `params` does not hold is left alone.
    """
    order: dict[str, int] = {}
    out: list[str] = []
    for start, end, is_code in _spans(statement):
        text = statement[start:end]
        if not is_code:
            out.append(text)
            continue

        def number(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in params:
                return match.group(0)
            return f"${order.setdefault(name, len(order) + 1)}"

        out.append(_NAMED_PARAM.sub(number, text))
    return "".join(out), [params[name] for name in order]


def json_safe(value: object) -> JsonValue:
    """A database value as JSON can hold it (the rules are in the module docstring)."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, decimal.Decimal):
        return _decimal(value)
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(bytes(value)).decode("ascii")
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [json_safe(v) for v in value]
    if isinstance(value, (uuid.UUID, ipaddress.IPv4Address, ipaddress.IPv6Address,
                          ipaddress.IPv4Network, ipaddress.IPv6Network,
                          ipaddress.IPv4Interface, ipaddress.IPv6Interface)):
        return str(value)
    return str(value)


def _decimal(value: decimal.Decimal) -> int | float | str:
    if not value.is_finite():
        return str(value)
    if value == value.to_integral_value():
        return int(value)
    as_float = float(value)
    return as_float if decimal.Decimal(repr(as_float)) == value else str(value)


def rows_payload(columns: Sequence[str], rows: Sequence[Sequence[object]], *,
                 as_objects: bool = True) -> JsonObject:
    """`{columns, rows, row_count}` with JSON-safe values."""
    names = list(columns)
    if as_objects:
        body: list[JsonValue] = [{name: json_safe(v) for name, v in zip(names, row, strict=False)}
                           for row in rows]
    else:
        body = [[json_safe(v) for v in row] for row in rows]
    return {"columns": list(names), "rows": body, "row_count": len(body)}


def flag(value: object, default: bool) -> bool:
    """A yes/no field that may arrive as a rendered string ("false") rather than a bool."""
    if value is None:
        return default
    if isinstance(value, str):
        return value.strip().lower() not in {"false", "no", "off", "0", ""}
    return bool(value)


def script_of(config: Mapping[str, JsonValue]) -> str | None:
    """The SQL of a task: `command` or `query` (the same field under two names)."""
    sql = config.get("command", config.get("query"))
    return sql if isinstance(sql, str) and sql.strip() else None


# What a task binds to its statements' parameters: a list (by position), a mapping (by name).
SqlParams: TypeAlias = Sequence[JsonValue] | Mapping[str, JsonValue] | None


@dataclass(frozen=True)
class SqlTask:
    """What every SQL kind reads from its task before it touches a database."""

    script: str
    params: SqlParams
    as_objects: bool


def read_sql_task(kind: str, config: Mapping[str, JsonValue], *,
                  params_forms: str) -> SqlTask | Outcome:
    """The task's SQL, `params` and `as_objects`, or the config failure naming what is wrong.

    `params_forms` says, in the kind's own placeholders, what a list and a mapping bind to.
    """
    script = script_of(config)
    if script is None:
        return Outcome.failure(f"{kind} task has no SQL in `command:` or `query:`", "config")
    params = config.get("params")
    if params is not None and not isinstance(params, (list, tuple, Mapping)):
        return Outcome.failure(f"{kind} `params` must be {params_forms}", "config")
    return SqlTask(script, params, flag(config.get("as_objects"), True))


async def postgres_credential(services: ToolServices, call: TaskCall, name: str, *, kind: str,
                              without_store: str = "") -> Credential | Outcome:
    """The PostgreSQL credential `name` the task names in `auth:`, or the credential failure:
    no store on this worker (`without_store` says what to do instead), an unknown or refused
    name, or a credential of another kind.
    """
    resolver = services.credentials
    if resolver is None:
        return Outcome.failure(f'{kind} task names credential "{name}" in `auth:`, but this worker '
                               f"has no credential store{without_store}", "credential")
    try:
        credential = await resolver.resolve(name, execution_id=call.execution_id)
    except NoetlStreamError as exc:
        return Outcome.failure(str(exc), "credential")
    if credential.kind not in POSTGRES_CREDENTIAL_KINDS:
        return Outcome.failure(f'credential "{name}" is of kind "{credential.kind}"; a {kind} task '
                               'takes credentials of kind "postgres" only', "credential")
    return credential
