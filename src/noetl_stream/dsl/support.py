"""Fields the parser accepts that a tool would not act on, so validation can say so.

NoETL playbooks carry fields this build does not implement; accepting them in silence would let
a playbook look as if it did something it does not. Each such field is reported when the playbook
is validated: a warning that `run` and `validate` print before anything starts, an error under
`--strict`. Three cases:

- `UNSUPPORTED`: a field NoETL defines and no tool here reads;
- `SHADOWED`: two names for one field, or two ways to give one value: the first present wins
  and the rest are ignored, as the tools read them;
- `NATS_OPERATION_FIELDS`: the fields each `nats` operation reads; others are ignored.

docs/tools.md lists the same per kind. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping

from noetl_stream.dsl.templating import has_template
from noetl_stream.jsonutil import JsonValue

ANY_KIND = "*"

UNSUPPORTED: dict[str, dict[str, str]] = {
    ANY_KIND: {
        "output": "NoETL's tool `output:` (store, select, accumulate, scope)",
        "outcome": "a task-level `outcome:` block",
        "assert": "NoETL's `assert: {expects, returns}` checks",
        "output_select": "NoETL's `output_select` (its server passes it on; no tool reads it)",
    },
    "python": {
        "module": "calling an installed module's function instead of `code:`",
        "function": "calling an installed module's function instead of `code:`",
    },
    "shell": {
        "capture": "NoETL's `capture:` switch (output is always captured into the result)",
    },
    "postgres": {
        "pool": "NoETL's postgres `pool:` sizing (each worker here keeps one pool per connection "
                "target, of up to 10 connections)",
        "schema": "NoETL's postgres `schema:` (NoETL's tool does not read it either; set "
                  "`search_path` in the SQL)",
    },
    "playbook": {
        "catalog_id": "starting a child by NoETL catalog id; name it by `path:`",
        "playbook_id": "starting a child by catalog content key; name it by `path:`",
        "poll_interval": "polling a child's status (a child's end is followed on its events)",
    },
}

# Step-level keys of the same kind (parser.STEP_KEYS accepts them).
UNSUPPORTED_STEP: dict[str, str] = {
    "output": "a step-level `output:` block",
    "outcome": "a step-level `outcome:` block",
}

SHADOWED: dict[str, tuple[tuple[str, ...], ...]] = {
    "http": (("url", "endpoint"), ("json", "form", "body", "data", "payload"),
             ("verify", "verify_ssl")),
    "python": (("script", "code"),),
    "postgres": (("script", "command", "query"), ("auth", "connection")),
    "duckdb": (("script", "command", "query"),),
    "playbook": (("return_step", "result_step"),),
    "shell": (("cmds", "cmd", "command"),),
}

NATS_OPERATION_FIELDS: dict[str, frozenset[str]] = {
    "kv_get": frozenset({"bucket", "key"}),
    "kv_put": frozenset({"bucket", "key", "value"}),
    "kv_delete": frozenset({"bucket", "key"}),
    "kv_keys": frozenset({"bucket", "key", "pattern"}),
    "object_put": frozenset({"bucket", "key", "name", "value", "data"}),
    "object_get": frozenset({"bucket", "key", "name"}),
    "js_publish": frozenset({"subject", "data", "value", "stream", "headers"}),
    "js_get_msg": frozenset({"stream", "seq", "subject"}),
}
_NATS_DATA_FIELDS = frozenset({"bucket", "key", "value", "subject", "data", "stream", "seq",
                               "pattern", "headers"})
_NATS_SHADOWED = {"object_put": ("value", "data"), "js_publish": ("data", "value"),
                  "kv_keys": ("key", "pattern"),
                  "js_get_msg": ("seq", "subject")}


def _given(body: Mapping[str, JsonValue], key: str) -> bool:
    return body.get(key) is not None


def ignored_fields(kind: str, body: Mapping[str, JsonValue]) -> list[tuple[str, str]]:
    """(field, why it has no effect) for every field of a task body that would be ignored."""
    found: list[tuple[str, str]] = []
    for table in (UNSUPPORTED[ANY_KIND], UNSUPPORTED.get(kind, {})):
        for key, what in table.items():
            if key in body:
                found.append((key, f"{what} is not supported by this version of noetl-stream; "
                                   "the field has no effect"))
    groups = SHADOWED.get(kind, ())
    if kind == "nats":
        groups = (*groups, *_nats_shadowed(body))
        found += _nats_unused(body)
    for group in groups:
        present = [key for key in group if _given(body, key)]
        for key in present[1:]:
            found.append((key, f'"{key}" is ignored: "{present[0]}" is given, and it wins'))
    return found


def _nats_operation(body: Mapping[str, JsonValue]) -> str | None:
    operation = body.get("operation")
    if not isinstance(operation, str) or has_template(operation):
        return None  # known only when rendered
    return operation if operation in NATS_OPERATION_FIELDS else None


def _nats_unused(body: Mapping[str, JsonValue]) -> list[tuple[str, str]]:
    operation = _nats_operation(body)
    if operation is None:
        return []
    reads = NATS_OPERATION_FIELDS[operation]
    return [(key, f'nats operation "{operation}" does not read "{key}"; the field has no effect')
            for key in sorted(_NATS_DATA_FIELDS - reads) if _given(body, key)]


def _nats_shadowed(body: Mapping[str, JsonValue]) -> tuple[tuple[str, ...], ...]:
    operation = _nats_operation(body)
    group = _NATS_SHADOWED.get(operation or "")
    return (group,) if group else ()


# NoETL's nats tool has these operations too; this runtime does not run them.
NOETL_NATS_OPERATIONS = ("kv_purge", "object_delete", "object_list", "object_info", "js_consume",
                         "js_stream_info")


def nats_operation_problem(body: Mapping[str, JsonValue]) -> str | None:
    """Why a `nats` task's literal `operation` cannot run here, or None."""
    operation = body.get("operation")
    if not isinstance(operation, str) or has_template(operation) or \
            operation in NATS_OPERATION_FIELDS:
        return None
    ours = ", ".join(NATS_OPERATION_FIELDS)
    if operation in NOETL_NATS_OPERATIONS:
        return f'NoETL form not run here: nats operation "{operation}"; instead, use one of {ours}'
    return f'unknown nats operation "{operation}"; the operations are {ours}'
