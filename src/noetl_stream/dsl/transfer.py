"""The `transfer` kind's settings: what a `source:` and a `target:` may be, read and checked.

The parser checks a playbook's literal values with `problems(..., rendered=False)`, skipping any
value a template decides; the tool checks the rendered task again with `rendered=True` and reads
it with `read_plan`. Pure: no I/O (docs/tools.md, "transfer").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from noetl_stream.dsl.templating import has_template

SOURCE_TYPES = ("http", "postgres", "duckdb")
TARGET_TYPES = ("postgres", "duckdb")
# Types NoETL's engines move data through that need a service this build does not reach.
NOETL_TYPES_NOT_BUILT = frozenset({"snowflake"})
# `insert` is the default name in NoETL's older engine, `append` in its newer one: the same mode.
MODES = ("append", "insert", "replace", "upsert")
DEFAULT_CHUNK_SIZE = 1000

# `tool` and `kind` are older names for `type` that NoETL's engines still read.
TYPE_KEYS = ("type", "kind", "tool")
SOURCE_FIELDS = frozenset({*TYPE_KEYS, "url", "method", "headers", "data_path", "query", "auth",
                           "credential", "connection", "db_path"})
TARGET_FIELDS = frozenset({*TYPE_KEYS, "table", "query", "mapping", "auth", "credential",
                           "connection", "db_path"})


@dataclass(frozen=True)
class Problem:
    """A setting that cannot work: its path under the task (`source.type`) and why."""

    path: tuple[str, ...]
    message: str


@dataclass(frozen=True)
class Endpoint:
    """One side of a transfer, with its settings as the playbook gave them."""

    type: str
    settings: Mapping[str, object]

    def get(self, key: str) -> object:
        value = self.settings.get(key)
        if value is None and key == "auth":
            value = self.settings.get("credential")
        if value is None and key == "db_path":
            value = self.settings.get("connection")
        return value


@dataclass(frozen=True)
class Plan:
    source: Endpoint
    target: Endpoint
    mode: str  # append | replace | upsert (`insert` is read as append)
    chunk_size: int
    mapping: dict[str, str] | None  # target column -> source field, in the playbook's order


def endpoint_type(settings: Mapping[str, object]) -> object:
    """`type` (or the older `kind` / `tool`) as given."""
    for key in TYPE_KEYS:
        if settings.get(key) is not None:
            return settings[key]
    return None


def _type_key(settings: Mapping[str, object]) -> str:
    return next((k for k in TYPE_KEYS if settings.get(k) is not None), "type")


def _decided(value: object, rendered: bool) -> bool:
    """Whether a value is known now: always once rendered, else when no template decides it."""
    return rendered or not has_template(value)


def problems(config: Mapping[str, object], *, rendered: bool) -> list[Problem]:
    """Every reason the `source`/`target`/`mode`/`chunk_size` of a transfer task cannot work."""
    found: list[Problem] = []
    source = config.get("source")
    target = config.get("target")
    if not isinstance(source, Mapping):
        found.append(Problem(("source",), "transfer task needs `source:`, a mapping with `type:` "
                                          f"({', '.join(SOURCE_TYPES)})"))
    else:
        found += _endpoint_problems("source", source, SOURCE_TYPES, SOURCE_FIELDS, rendered)
    if not isinstance(target, Mapping):
        found.append(Problem(("target",), "transfer task needs `target:`, a mapping with `type:` "
                                          f"({', '.join(TARGET_TYPES)}) and `table:`"))
    else:
        found += _endpoint_problems("target", target, TARGET_TYPES, TARGET_FIELDS, rendered)
    mode = config.get("mode")
    if mode is not None and _decided(mode, rendered) and str(mode).lower() not in MODES:
        found.append(Problem(("mode",), f'transfer mode "{mode}" is not one of {", ".join(MODES)}'))
    chunk = config.get("chunk_size")
    if chunk is not None and _decided(chunk, rendered) and _positive_int(chunk) is None:
        found.append(Problem(("chunk_size",), f"chunk_size must be a whole number above 0, not "
                                              f"{chunk!r}"))
    return found


def _positive_int(value: object) -> int | None:
    if isinstance(value, bool):
        return None
    try:
        number = int(str(value).strip())
    except ValueError:
        return None
    return number if number > 0 else None


def _endpoint_problems(side: str, settings: Mapping[str, object], types: tuple[str, ...],
                       fields: frozenset[str], rendered: bool) -> list[Problem]:
    found = [Problem((side, str(key)), f'transfer {side} has no field "{key}"; it reads '
                                       f"{', '.join(sorted(fields))}")
             for key in settings if key not in fields]
    kind = endpoint_type(settings)
    type_path = (side, _type_key(settings))
    if kind is None:
        found.append(Problem((side, "type"), f"transfer {side} needs `type:` ({', '.join(types)})"))
        return found
    if not _decided(kind, rendered):
        return found
    name = str(kind).lower()
    if name in NOETL_TYPES_NOT_BUILT:
        found.append(Problem(type_path, f'transfer {side} type "{kind}" is not available in this '
                                        f"version of noetl-stream; {side} types here are "
                                        f"{', '.join(types)}"))
        return found
    if name not in types:
        found.append(Problem(type_path, f'transfer {side} type "{kind}" is not one of '
                                        f"{', '.join(types)}"))
        return found
    found += _required(side, name, settings)
    return found


def _required(side: str, kind: str, settings: Mapping[str, object]) -> list[Problem]:
    found: list[Problem] = []

    def given(key: str) -> bool:
        value = settings.get(key)
        return value is not None and value != ""

    if side == "source" and kind == "http" and not given("url"):
        found.append(Problem((side, "url"), "an http transfer source needs `url:`"))
    if side == "source" and kind != "http" and not given("query"):
        found.append(Problem((side, "query"), f"a {kind} transfer source needs `query:` (the SQL "
                                              "that reads the rows)"))
    if kind == "postgres" and not (given("auth") or given("credential") or given("connection")):
        found.append(Problem((side, "auth"), f"a postgres transfer {side} needs `auth:` (a "
                                             "credential name) or `connection:`"))
    if side == "target" and not (given("table") or given("query")):
        found.append(Problem((side, "table"), "a transfer target needs `table:` (or `query:`, the "
                                              "statement each row runs)"))
    mapping = settings.get("mapping")
    if side == "target" and mapping is not None and not _is_mapping_of_names(mapping):
        found.append(Problem((side, "mapping"), "mapping must map each target column to a source "
                                                "field name: {column: field, ...}"))
    if side == "source" and settings.get("headers") is not None \
            and not isinstance(settings["headers"], Mapping):
        found.append(Problem((side, "headers"), "headers must be a mapping of name -> value"))
    return found


def _is_mapping_of_names(value: object) -> bool:
    return isinstance(value, Mapping) and bool(value) and all(
        isinstance(k, str) and k and isinstance(v, str) and v for k, v in value.items())


def read_plan(config: Mapping[str, object]) -> Plan:
    """The plan of a rendered task; call only when `problems(config, rendered=True)` is empty."""
    source, target = config["source"], config["target"]
    if not isinstance(source, Mapping) or not isinstance(target, Mapping):
        raise TypeError("read_plan needs a config without problems: its source and target are "
                        "mappings")
    mode = str(config.get("mode") or "append").lower()
    mapping = target.get("mapping")
    return Plan(source=Endpoint(str(endpoint_type(source)).lower(), source),
                target=Endpoint(str(endpoint_type(target)).lower(), target),
                mode="append" if mode == "insert" else mode,
                chunk_size=_positive_int(config.get("chunk_size") or DEFAULT_CHUNK_SIZE)
                or DEFAULT_CHUNK_SIZE,
                mapping=dict(mapping) if isinstance(mapping, Mapping) else None)
