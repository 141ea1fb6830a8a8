"""How a stored result reads in templates: the shapes NoETL's engines give it, computed on read.

A result is stored once, in the shape its tool returned (the http body, `{columns, rows,
row_count}`, a loop's list). Playbooks written for NoETL's Python and Rust engines read the same
result through envelopes those engines wrapped around it (`fetch.data.data`, `fetch.body`,
`query.command_0.rows`, `loop.stats.total`); the views here answer those reads. Invariants: a view
read by name never replaces a key the result has itself (only `output.data` of an http call is
NoETL's envelope, whose keys win), and nothing built here is stored or sent, so the
extra shapes cost no bytes in router state, commands or events. Pure, shared by router and worker.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import TypeGuard

from noetl_stream import jsonutil
from noetl_stream.dsl.values import DataEnvelope, ListView, Locate, LoopResults, ResultMapping
from noetl_stream.jsonutil import JsonValue

_SQL_ROWS = ("columns", "rows", "row_count")
STORED_APART_BYTES = 100 * 1024  # NoETL's worker inline budget (NOETL_EVENT_RESULT_CONTEXT_MAX_BYTES)
STEP_RESULTS_BUCKET = "noetl_step_results"


def step_view(result: object, http: Mapping[str, JsonValue] | None, loop: bool, *,
              execution_id: str | None = None) -> object:
    """A finished step's result as templates read it.

    Given the execution, a mapping result whose JSON is larger than NoETL's worker keeps inline
    also answers the locators NoETL gives a result it stores apart: `_ref` and `_uri` name
    where this result is stored (`noetl_step_results/<execution>.<key>`), `_store` is `kv`.
    """
    if loop and isinstance(result, list):
        return LoopResults(result)
    locate = _locator(result, execution_id) if execution_id else None
    if http:
        view = http_view(result, http)
        return ResultMapping(view, locate=locate) if isinstance(view, dict) and locate else view
    view = sql_view(result)
    if isinstance(view, dict) and "data" not in view:
        return DataEnvelope(view, data=view, locate=locate)
    return ResultMapping(view, locate=locate) if isinstance(view, dict) and locate else view


def task_view(result: object, http: Mapping[str, JsonValue] | None) -> object:
    """A task's result as the later tasks of its pipeline, and its own `set:` as `output`, read it.

    For http this is NoETL's Rust task sequence shape `{status_code, headers, data: <body>, body:
    <body>}`: there those four names are the reply's even when the body has keys of those names
    (a body `{data: [...], paging}` reads as `fetch.data.paging`, and `fetch.data.data` is its
    list); the body's other keys read too. Any other result reads as a finished step's.
    """
    if http and isinstance(result, dict):
        return {**result, **_http_envelope(result, http)}
    return step_view(result, http, False)


def stored_key(data: bytes) -> str:
    """The key a step result's JSON is stored under, after `<execution_id>.` (its content's)."""
    return hashlib.sha256(data).hexdigest()[:32]


def _locator(result: object, execution_id: str) -> Locate:
    def locate() -> dict[str, str] | None:
        data = jsonutil.dumps(result)
        if len(data) <= STORED_APART_BYTES:
            return None
        ref = f"{STEP_RESULTS_BUCKET}/{execution_id}.{stored_key(data)}"
        return {"_ref": ref, "_uri": ref, "_store": "kv"}
    return locate


def http_view(result: object, http: Mapping[str, JsonValue] | None) -> object:
    """An http result read by name (`fetch.data`, `{{ fetch }}`): the body, plus the envelope keys
    NoETL's http tools put around it - `data` (the Python engine's `{status_code, headers,
    data}`), `body` (the Rust tool's `{status_code, headers, body}`), `status_code` and
    `headers` - each only where the body has no key of that name. A list body stays a list that
    also answers those four names.
    """
    if not http:
        return result
    if isinstance(result, list):
        return _http_list_view(result, http)
    if not isinstance(result, dict):
        return result
    view = dict(result)
    for key, value in _http_envelope(result, http).items():
        view.setdefault(key, value)
    return view


def http_output_data(result: object, http: Mapping[str, JsonValue]) -> object:
    """`output.data` of an http call. NoETL's fixtures read it two ways that disagree when the
    body has its own `data` key: templates written for the Python engine's envelope read
    `{{ output.data.data }}` as the whole body, while code written for the Rust worker binds
    `{{ output }}` into python and reads `output["data"]["data"]` as the body's own `data`.
    So the value is the body's keys with `status_code`, `headers` and `body` beside them (the
    body's own `data` kept, for code), and a template's `.data` on it is the whole body
    (`DataEnvelope`, dsl/templating.py).
    """
    if isinstance(result, list):
        return _http_list_view(result, http)
    if not isinstance(result, dict):
        return result
    envelope = _http_envelope(result, http)
    if "data" in result:
        envelope.pop("data")
    return DataEnvelope({**result, **envelope}, data=result)


def _http_envelope(body: JsonValue, http: Mapping[str, JsonValue]) -> dict[str, JsonValue]:
    return {"status_code": http.get("status"), "headers": http.get("headers") or {},
            "body": body, "data": body}


def _http_list_view(body: list[JsonValue], http: Mapping[str, JsonValue]) -> ListView:
    return ListView(body, names={"status_code": http.get("status"),
                                 "headers": http.get("headers") or {}},
                    itself=("data", "body"))


def is_sql_payload(value: object) -> TypeGuard[dict[str, JsonValue]]:
    """A SQL statement's payload as tools/sql.py shapes it: rows, or a count of affected rows."""
    return isinstance(value, dict) and (all(k in value for k in _SQL_ROWS)
                                        or "affected_rows" in value)


def sql_view(result: object) -> object:
    """A SQL result that also answers NoETL's older per-statement keys `command_<i>`, each with
    `status: success` and, for a statement without rows, `row_count` = rows affected.

    The result's own keys are the last statement's payload, so `command_<n-1>` is built from
    them; the earlier statements' payloads are the `command_<i>` the postgres tool stores beside
    them. A script result without them (duckdb keeps only the last payload) gets no view.
    """
    if not is_sql_payload(result):
        return result
    count = result.get("statement_count", 1)
    if not isinstance(count, int) or isinstance(count, bool) or count < 1 or (
            count > 1 and "command_0" not in result):
        return result
    view = dict(result)
    for index in range(count - 1):
        stored = result.get(f"command_{index}")
        if isinstance(stored, dict):
            view[f"command_{index}"] = _statement_view(stored)
    last = {k: v for k, v in result.items()
            if k != "statement_count" and not _is_command_key(k)}
    view.setdefault(f"command_{count - 1}", _statement_view(last))
    return view


def _is_command_key(key: str) -> bool:
    return key.startswith("command_") and key[len("command_"):].isdigit()


def _statement_view(payload: Mapping[str, JsonValue]) -> dict[str, JsonValue]:
    view: dict[str, JsonValue] = {"status": "success", **payload}
    if "row_count" not in view and "affected_rows" in view:
        view["row_count"] = view["affected_rows"]
    return view


def output_view(result: object, error: Mapping[str, JsonValue] | None,
                http: Mapping[str, JsonValue] | None, *, loop: bool = False,
                status: str | None = None) -> dict[str, object]:
    """`output` as templates read it after a call or a step: the result's own keys (and its
    views'), overlaid with the envelope `status`, `data`, `response`, `error`, `http`, `pg`; for
    http also `status_code` and `headers` where the result has no key of that name (an error
    reply has no result, so there they always come from the reply). For an http call `data` is
    NoETL's Python envelope (`http_output_data`), not the step read.
    """
    view = step_view(result, http, loop)
    output: dict[str, object] = dict(view) if isinstance(view, dict) else {}
    data = http_output_data(result, http) if http and not loop else view
    output.update({"status": status or ("error" if error else "ok"), "data": data,
                   "response": data, "error": error, "http": http,
                   "pg": error.get("pg") if error else None})
    if http:
        output.setdefault("status_code", http.get("status"))
        output.setdefault("headers", http.get("headers") or {})
    return output
