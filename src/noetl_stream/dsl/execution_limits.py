"""The execution-wide knobs of `executor.spec` (and of a trigger's `spec.concurrency`).

    executor:
      spec:
        concurrency: {limit: 2, key: "{{ workload.customer }}", on_limit: queue}
        timeout: 1h          # the whole execution fails past it (kind `timeout`)
        sla: {max_duration: 30m}   # `sla.missed` is emitted once past it; nothing fails

They belong to the execution, not to its steps: unlike the executor's other spec keys, none is
inherited by steps and tasks (dsl/layering.py EXECUTOR_OWN_KEYS). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict

from noetl_stream.dsl.layering import timeout_s
from noetl_stream.dsl.source import line_of, suggest
from noetl_stream.dsl.templating import syntax_problem
from noetl_stream.jsonutil import JsonValue

OnLimit = Literal["queue", "skip", "cancel_oldest"]
ON_LIMIT: tuple[str, ...] = ("queue", "skip", "cancel_oldest")
_CONCURRENCY_KEYS = ("limit", "key", "on_limit")
_SLA_KEYS = ("max_duration",)

# (line, field, message); the line is None when the document has no line for it.
Problem = tuple[int | None, str, str]


class Concurrency(BaseModel):
    """At most `limit` executions of one playbook per rendered `key` run at once."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    limit: int
    key: str | None = None
    on_limit: OnLimit = "queue"


def concurrency_of(executor: Mapping[str, JsonValue]) -> Concurrency | None:
    """`executor.spec.concurrency` (checked by `problems` when the playbook was parsed)."""
    raw = _spec(executor).get("concurrency")
    return Concurrency.model_validate(dict(raw)) if isinstance(raw, Mapping) else None


def execution_timeout_s(executor: Mapping[str, JsonValue]) -> float | None:
    """`executor.spec.timeout` in seconds: how long the whole execution may run."""
    seconds = timeout_s(_spec(executor))
    return seconds if seconds is not None and seconds > 0 else None


def sla_s(executor: Mapping[str, JsonValue]) -> float | None:
    """`executor.spec.sla.max_duration` in seconds."""
    sla = _spec(executor).get("sla")
    if not isinstance(sla, Mapping):
        return None
    seconds = timeout_s({"timeout": sla.get("max_duration")})
    return seconds if seconds is not None and seconds > 0 else None


def _spec(executor: Mapping[str, JsonValue]) -> Mapping[str, JsonValue]:
    spec = executor.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def problems(executor: JsonValue) -> list[Problem]:
    """What is wrong with the execution-wide fields of an `executor:` block (a YAML node)."""
    spec = executor.get("spec") if isinstance(executor, Mapping) else None
    if not isinstance(spec, Mapping):
        return []
    out: list[Problem] = []
    if "concurrency" in spec:
        out += concurrency_problems(spec["concurrency"], spec, "executor.spec.concurrency")
    if "timeout" in spec:
        value = spec["timeout"]
        seconds = timeout_s(spec)
        if seconds is None or seconds <= 0:
            out.append((line_of(spec, "timeout"), "executor.spec.timeout",
                        "the execution's timeout must be a positive number of seconds or a "
                        f"duration (30s, 5m, 1h), got {value!r}"))
    if "sla" in spec:
        out += _sla_problems(spec["sla"], spec)
    return out


def concurrency_problems(value: JsonValue, parent: JsonValue, where: str) -> list[Problem]:
    """What is wrong with a `concurrency:` mapping found under `parent`."""
    line = line_of(parent, where.rsplit(".", 1)[-1])
    if not isinstance(value, Mapping):
        return [(line, where, "concurrency is a mapping: {limit: N, key: \"{{ ... }}\", "
                              "on_limit: queue | skip | cancel_oldest}")]
    out: list[Problem] = []
    for key in value:
        if key not in _CONCURRENCY_KEYS:
            out.append((line_of(value, key) or line, f"{where}.{key}",
                        f"unknown key {key!r}{suggest(str(key), _CONCURRENCY_KEYS)}"))
    limit = value.get("limit")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        out.append((line_of(value, "limit") or line, f"{where}.limit",
                    f"limit must be a whole number of at least 1, got {limit!r}"))
    group = value.get("key")
    if group is not None and (not isinstance(group, str) or syntax_problem(group) is not None):
        problem = syntax_problem(group) if isinstance(group, str) else "it is not a string"
        out.append((line_of(value, "key") or line, f"{where}.key",
                    f"key is a template string naming the group: {problem}"))
    on_limit = value.get("on_limit", "queue")
    if on_limit not in ON_LIMIT:
        out.append((line_of(value, "on_limit") or line, f"{where}.on_limit",
                    f"on_limit is one of {', '.join(ON_LIMIT)}, got {on_limit!r}"
                    f"{suggest(str(on_limit), ON_LIMIT)}"))
    return out


def _sla_problems(value: JsonValue, spec: JsonValue) -> list[Problem]:
    line = line_of(spec, "sla")
    if not isinstance(value, Mapping):
        return [(line, "executor.spec.sla", "sla is a mapping: {max_duration: 30m}")]
    out: list[Problem] = [(line_of(value, key) or line, f"executor.spec.sla.{key}",
                           f"unknown key {key!r}{suggest(str(key), _SLA_KEYS)}")
                          for key in value if key not in _SLA_KEYS]
    seconds = timeout_s({"timeout": value.get("max_duration")})
    if seconds is None or seconds <= 0:
        out.append((line_of(value, "max_duration") or line, "executor.spec.sla.max_duration",
                    "max_duration must be a positive number of seconds or a duration (30s, 5m, "
                    f"1h), got {value.get('max_duration')!r}"))
    return out
