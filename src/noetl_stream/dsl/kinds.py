"""Tool kinds the language knows, and the fields each one reads (for did-you-mean on typos)."""

from __future__ import annotations

# NoETL's flat postgres connection fields (its Rust tool's names, then its Python tool's), which
# the parser folds into one `connection:` mapping (dsl/pg_connection.py).
CONNECTION_FIELDS = ("host", "port", "user", "password", "database",
                     "db_host", "db_port", "db_user", "db_password", "db_name")

COMMON_TASK_KEYS = frozenset({"name", "kind", "spec", "set", "input", "args", "desc", "description",
                              "output", "outcome", "set_ctx", "set_iter", "meta", "assert", "output_select",
                              "retry", "poll"})

KIND_FIELDS: dict[str, frozenset[str]] = {
    "python": frozenset({"code", "code_b64", "timeout", "libs", "module", "function", "script"}),
    "http": frozenset({"method", "url", "endpoint", "params", "headers", "json", "body", "data",
                       "payload", "timeout", "auth", "follow_redirects", "verify_ssl", "verify",
                       "response_type", "form"}),
    "noop": frozenset({"result", "message"}),
    "workbook": frozenset({"name"}),
    "playbook": frozenset({"path", "version", "args", "async", "catalog_id", "playbook_id",
                           "return_step", "payload", "return_result", "result_step",
                           "timeout", "poll_interval"}),
    "postgres": frozenset({"command", "command_b64", "query", "params", "auth", "connection",
                           "as_objects", "timeout", "script", *CONNECTION_FIELDS, "schema", "pool"}),
    "duckdb": frozenset({"command", "command_b64", "query", "params", "auth", "db_path",
                         "as_objects", "timeout", "script"}),
    "shell": frozenset({"command", "cmds", "cmd", "shell", "cwd", "env", "timeout", "capture"}),
    "secrets": frozenset({"name", "provider"}),
    "nats": frozenset({"operation", "bucket", "key", "value", "subject", "data", "stream", "seq",
                       "auth", "pattern", "headers", "name"}),
    "transfer": frozenset({"source", "target", "mode", "chunk_size", "timeout"}),
}

# Other spellings of a field that NoETL accepts (older ones, its Rust tools' and its CLI's):
# spelling -> the field it stands for. The parser rewrites them, so tools only see the field.
FIELD_ALIASES: dict[str, str] = {"credential": "auth", "timeout_seconds": "timeout",
                                 "connection_string": "connection", "db_conn_string": "connection",
                                 "db": "db_path", "database": "db_path", "commands": "command"}


def field_aliases(kind: str) -> dict[str, str]:
    """The older spellings `kind` accepts: those of fields the kind reads."""
    fields = KIND_FIELDS.get(kind, frozenset())
    return {old: new for old, new in FIELD_ALIASES.items() if new in fields}


# NoETL's tool kinds that this build does not run: a playbook naming one is refused at
# validation with that said, rather than as a misspelling.
NOETL_KINDS_NOT_BUILT = frozenset({"snowflake", "gcs", "s3", "container", "agent", "mcp",
                                   "subscription", "ducklake", "rhai", "script",
                                   "kafka", "pubsub", "sink", "iterator"})

# NoETL's tool kinds that read NoETL's own result store (a `noetl://execution/...` reference, the
# `_ref` / `reference` its workers put in place of a large result): refused with the reason and
# what to write instead, since results here are read where they are, whatever their size.
_READ_RESULTS_DIRECTLY = (
    "it reads NoETL's result store (a noetl:// reference); here a step's result is read "
    "directly in templates however large it is (`{{ big_step.rows }}`: a result kept in the "
    "object store is fetched for the reader), so drop this step and read the step it names")
NOETL_KINDS_REFUSED: dict[str, str] = {"result_fetch": _READ_RESULTS_DIRECTLY,
                                       "artifact": _READ_RESULTS_DIRECTLY}

# Kinds this build can execute; the others are known words that a later build runs.
RUNNABLE_KINDS = frozenset({"python", "http", "noop", "workbook", "shell", "nats", "secrets",
                            "postgres", "duckdb", "playbook", "transfer"})
