"""NoETL's flat postgres connection fields as one `connection:` mapping, and its `commands:`
list of statements as one script.

NoETL's tools take the connection of a `postgres` task as separate fields: `host`, `port`,
`user`, `password`, `database` (its Rust tool) or `db_host`, `db_port`, `db_user`,
`db_password`, `db_name` (its Python tool). The postgres tool here reads one `connection:`
(a URI or a mapping of the same settings), so the parser folds them into it. Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from noetl_stream.dsl.kinds import CONNECTION_FIELDS
from noetl_stream.jsonutil import JsonObject

SETTING = {"db_host": "host", "db_port": "port", "db_user": "user", "db_password": "password",
           "db_name": "database"}

Report = Callable[[str, str], None]
"""report(field, message): an error of the task's field."""


def fold(config: JsonObject, report: Report) -> JsonObject:
    """`config` with its flat connection fields moved into `connection`; both ways given, or
    one setting under both names, is reported.
    """
    given = [name for name in CONNECTION_FIELDS if config.get(name) is not None]
    if not given:
        return config
    out = {k: v for k, v in config.items() if k not in CONNECTION_FIELDS}
    other = "auth" if out.get("auth") else "connection" if out.get("connection") else None
    if other is not None:
        report(given[0], f'"{given[0]}" is a connection field and the task also gives `{other}:`; '
                         f"give the connection one way: `{other}:` or the fields")
        return out
    settings: JsonObject = {}
    for name in given:
        setting = SETTING.get(name, name)
        if setting in settings and settings[setting] != config[name]:
            report(name, f'"{name}" and "{setting}" are one setting given twice with different '
                         "values; keep one of them")
        settings[setting] = config[name]
    out["connection"] = settings
    return out


def joined_statements(statements: Sequence[object]) -> str:
    """NoETL's `commands:` list as one script: each statement ends in `;`, one per line."""
    out = []
    for statement in statements:
        text = str(statement).strip()
        if text:
            out.append(text if text.endswith(";") else text + ";")
    return "\n".join(out)
