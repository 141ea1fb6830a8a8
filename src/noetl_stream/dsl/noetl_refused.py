"""NoETL forms this runtime refuses, each with what to write instead.

NoETL's engines accept keys and tool kinds that this runtime does not run. Ignoring them would
let a playbook look as if it did what it says, so validation refuses each one by name: the
message says which NoETL form it is and how to write the same here. docs/noetl-compatibility.md
lists every form NoETL accepts and what becomes of it. Pure.
"""

from __future__ import annotations

# (where, key) -> (the NoETL form, what to write instead). `where` is "playbook" (top level),
# "case" (an entry of a step's `case:`), or "tool:<kind>" / "tool:*" (a task's fields).
FIELDS: dict[tuple[str, str], tuple[str, str]] = {
    ("playbook", "vars"): (
        "NoETL's top-level `vars:` (its server reads the map and no engine uses it)",
        "put the values under `workload:`, or under the first step's `vars:`"),
    ("case", "rhai"): (
        "a Rhai condition of NoETL's CLI runtime",
        "write the condition as a Jinja `when: \"{{ ... }}\"`"),
    ("case", "when_rhai"): (
        "a Rhai condition of NoETL's CLI runtime",
        "write the condition as a Jinja `when: \"{{ ... }}\"`"),
    ("tool:*", "eval"): (
        "NoETL's `tool.eval` list (its server checks it; no engine runs it)",
        "write each entry as a rule under the task's `spec.policy.rules`: `{when: <expr>, then: "
        "{do, attempts, backoff, delay, to: <target>, set: <set_vars>}}`, its `else` as "
        "`{else: {then: {do: ...}}}`"),
    ("tool:python", "python"): (
        "the interpreter NoETL's Rust python tool runs the code with",
        "remove it: workers run `code:` in their own interpreter"),
    ("tool:python", "env"): (
        "environment variables NoETL's Rust python tool sets for the code",
        "pass the values in `args:`; the code reads them as variables"),
    ("tool:python", "cwd"): (
        "the working directory of NoETL's Rust python tool",
        "use absolute paths in the code, or run the program from a `shell` task with `cwd:`"),
    ("tool:python", "deps"): (
        "packages NoETL's Python tool installs before running the code",
        "install them on the workers and name the modules in `libs:`"),
    ("tool:python", "packages"): (
        "packages NoETL's Python tool installs before running the code",
        "install them on the workers and name the modules in `libs:`"),
    ("tool:python", "sys_path"): (
        "module folders NoETL's Python tool adds to `sys.path`",
        "install the modules into the workers' environment and name them in `libs:`"),
    ("tool:python", "venv_path"): (
        "the virtualenv NoETL's Python tool runs the code in",
        "install the modules into the workers' environment and name them in `libs:`"),
    ("tool:python", "auth"): (
        "a credential NoETL's Python tool resolves for the code",
        "declare it in `keychain:` and pass `{{ keychain.<name>... }}` in `args:`"),
    ("tool:nats", "url"): (
        "NoETL's inline NATS connection field",
        "name a credential holding `url` (and `user`/`password` or `token`) in `auth:`"),
    ("tool:nats", "user"): (
        "NoETL's inline NATS connection field",
        "name a credential holding `url`, `user` and `password` in `auth:`"),
    ("tool:nats", "password"): (
        "NoETL's inline NATS connection field",
        "name a credential holding `url`, `user` and `password` in `auth:`"),
    ("tool:nats", "token"): (
        "NoETL's inline NATS connection field",
        "name a credential holding `url` and `token` in `auth:`"),
    ("tool:nats", "ttl"): (
        "a per-write TTL of NoETL's `kv_put`",
        "give the bucket its TTL where the bucket is created"),
    ("tool:nats", "encoding"): (
        "the value encoding of NoETL's nats tool",
        "values are written as text or JSON and read back as text (base64 when not UTF-8); "
        "convert them in a python task"),
    ("tool:nats", "last"): (
        "`last:` of NoETL's `js_get_msg`",
        "give `subject:` without `seq:`: the last message on that subject is read"),
    ("tool:nats", "consumer"): (
        "a field of NoETL's `js_consume`",
        "read messages with `operation: js_get_msg` by `seq` or `subject`"),
    ("tool:nats", "batch"): (
        "a field of NoETL's `js_consume`",
        "read messages with `operation: js_get_msg` by `seq` or `subject`"),
    ("tool:nats", "timeout_ms"): (
        "a field of NoETL's `js_consume`",
        "read messages with `operation: js_get_msg`; bound the wait with `spec.timeout`"),
    ("tool:nats", "ack"): (
        "a field of NoETL's `js_consume`",
        "read messages with `operation: js_get_msg`, which acknowledges nothing"),
    ("tool:duckdb", "credentials"): (
        "credentials NoETL's Python duckdb tool turns into DuckDB secrets",
        "attach PostgreSQL credentials with `auth:`; read cloud storage from a python task"),
    ("tool:duckdb", "auto_secrets"): (
        "NoETL's switch to make DuckDB secrets from credentials",
        "attach PostgreSQL credentials with `auth:`; read cloud storage from a python task"),
    ("tool:duckdb", "require_cloud_output"): (
        "NoETL's check that output goes to cloud storage",
        "write files from a python task"),
    ("tool:playbook", "parent_execution_id"): (
        "NoETL's override of a child's parent execution",
        "remove it: a child's parent is always the execution that starts it"),
    ("tool:transfer", "direction"): (
        "NoETL's transfer `direction:`",
        "remove it: the direction follows from `source.type` and `target.type`"),
}

# NoETL tool kinds this runtime does not run -> what to write instead.
KINDS: dict[str, str] = {
    "snowflake": "query Snowflake from a python task (its connector installed on the workers)",
    "snowflake_transfer": "move the rows with a python task, or `kind: transfer` between "
                          "postgres and duckdb",
    "gcs": "read and write objects from a python task",
    "s3": "read and write objects from a python task",
    "container": "run the program from a `shell` task on a worker that has it",
    "script": "run the program from a `shell` task, or its python from a `python` task with "
              "`script:`",
    "agent": "call the model's API from an `http` task",
    "mcp": "call the MCP server's JSON-RPC endpoint from an `http` task (POST `tools/call`)",
    "gateway": "call the service from an `http` task",
    "rhai": "write the logic as a `python` task",
    "wasm": "write the logic as a `python` task",
    "ducklake": "use `kind: duckdb` (attach the catalog's PostgreSQL with `auth:`)",
    "subscription": "read messages with `kind: nats` (`operation: js_get_msg`)",
    "kafka": "consume from a python task",
    "pubsub": "consume from a python task",
    "iterator": "iterate with the step's `loop: {in, iterator}`",
    "task_sequence": "write the tasks as a list under the step's `tool:` (a pipeline)",
    "playbooks": "start each child with its own `kind: playbook` task",
    "sink": "write the rows with a step's `sink:` or a postgres/duckdb task",
    "auth": "declare the credential in `keychain:` (kind `bearer` or `oauth2`) and use it in "
            "the task's `auth:` or headers",
    "provider": "call the provider's API from an `http` task",
}


def field_message(where: str, kind: str | None, key: str) -> str | None:
    """The refusal of `key` at `where` (for a task: of kind `kind`), or None when it is not a
    NoETL form this runtime refuses.
    """
    places = (f"tool:{kind}", "tool:*") if where == "tool" else (where,)
    for place in places:
        if (place, key) in FIELDS:
            form, instead = FIELDS[(place, key)]
            return f'NoETL form not run here: "{key}" ({form}); instead, {instead}'
    return None


def kind_message(kind: str) -> str | None:
    """The refusal of a NoETL tool kind, or None when NoETL has no such kind here."""
    instead = KINDS.get(kind)
    if instead is None:
        return None
    return f'NoETL form not run here: tool kind "{kind}"; instead, {instead}'


# NoETL's inline http `auth: {type: ...}` types this runtime does not present -> instead.
HTTP_AUTH_TYPES = {
    "gcp_adc": "declare a token in `keychain:` (kind `oauth2` or `bearer`) and send it with "
               "`headers: {Authorization: \"Bearer {{ keychain.<name>... }}\"}`",
}


def http_auth_message(auth: object) -> str | None:
    """The refusal of an http task's inline `auth:` type, or None."""
    if isinstance(auth, dict) and "type" not in auth and ("provider" in auth or "source" in auth):
        return ("NoETL form not run here: http `auth: {provider, scopes}` (NoETL's CLI runtime's "
                "cloud sign-in); instead, " + HTTP_AUTH_TYPES["gcp_adc"])
    kind = auth.get("type") if isinstance(auth, dict) else None
    instead = HTTP_AUTH_TYPES.get(kind) if isinstance(kind, str) else None
    if instead is None:
        return None
    return f'NoETL form not run here: http auth type "{kind}"; instead, {instead}'


# Functions NoETL's Python engine adds to templates and this runtime does not -> instead.
TEMPLATE_GLOBALS = {
    "token": "declare the token in `keychain:` (kind `oauth2`, or `credential` for a stored "
             "token) and read `{{ keychain.<name>.access_token }}`",
}


def template_global_message(name: str) -> str:
    return (f"NoETL form not run here: template function {name}(...) (NoETL's Python engine); "
            f"instead, {TEMPLATE_GLOBALS[name]}")
