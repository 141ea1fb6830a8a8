"""The field each tool kind cannot run without, checked the same way for every kind. Pure.

A kind's requirement is a list of spellings of which one must be present in the task's body
(`command:` or `query:` for SQL, `url:` or `endpoint:` for http, ...): the same names the
kind's tool reads at run time (tools/), so a task that validates never fails at run time for a
missing field. A key the kind does not know is shown beside the error (`sql:` in a postgres
task), since that is most often where the field was written under another name.
"""

from __future__ import annotations

from collections.abc import Mapping

from noetl_stream.dsl.kinds import COMMON_TASK_KEYS, KIND_FIELDS, field_aliases
from noetl_stream.jsonutil import JsonValue

# kind -> (the fields of which one is required, how the error names them). `script:` stands for
# the kind's main field read from a file (dsl/scripts.py); `*_b64` is that field base64-encoded.
REQUIRED: dict[str, tuple[tuple[str, ...], str]] = {
    "python": (("code", "code_b64", "script"), "`code:` (or `script:`)"),
    "http": (("url", "endpoint"), "`url:`"),
    "postgres": (("command", "commands", "query", "command_b64", "script"),
                 "`command:` (or `query:`, `script:`)"),
    "duckdb": (("command", "commands", "query", "command_b64", "script"),
               "`command:` (or `query:`, `script:`)"),
    "shell": (("command", "cmds", "cmd"), "`command:` (or `cmds:`)"),
    "secrets": (("name",), "`name:` (the secret to read)"),
    "nats": (("operation",), "`operation:`"),
    "playbook": (("path",), "`path:` (a catalog path or ./file.yaml)"),
}


def missing_field(kind: str, body: Mapping[str, JsonValue]) -> tuple[str, str] | None:
    """(field, message) when `body`, a task of `kind` as written, lacks the field the kind
    needs; None when it has one (or the kind needs none: noop, transfer's own check).
    """
    required = REQUIRED.get(kind)
    if required is None:
        return None
    names, shown = required
    if any(_given(body.get(name)) for name in names):
        return None
    message = f"{kind} task needs {shown}"
    strays = _unknown_keys(kind, body)
    if strays:
        listed = ", ".join(f"`{k}:`" for k in strays)
        message += f"; {listed} is no {kind} field" if len(strays) == 1 else \
            f"; {listed} are no {kind} fields"
    return names[0], message


def _given(value: JsonValue) -> bool:
    """Present and not empty: an empty string or list runs nothing."""
    if value is None:
        return False
    if isinstance(value, (str, list, dict)):
        return bool(value.strip() if isinstance(value, str) else value)
    return True


def _unknown_keys(kind: str, body: Mapping[str, JsonValue]) -> list[str]:
    fields = KIND_FIELDS.get(kind, frozenset()) | COMMON_TASK_KEYS | set(field_aliases(kind))
    return sorted(str(k) for k in body if k not in fields)
