"""Spec layering (spec 002 §3): each task's effective spec, computed once when a playbook is parsed.

    effective task spec = kind defaults <- executor.spec <- step.spec <- loop.spec <- task.spec

Inner layers win. Mappings merge key by key, scalars and lists replace (§3.1). `policy` never
crosses a layer: its meaning depends on the scope that declares it (§3.2, §5), so admission rules
stay with the step, `limits` with the executor and task rules with the task. The loop's own
scheduling knobs (`mode`, `max_in_flight`, `exec`) stay with the loop too.

After `apply`, `Task.spec` is the effective spec; the worker and the tools read only that. Pure.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import overload

from noetl_stream.dsl.models import Playbook, Step, Task
from noetl_stream.dsl.source import as_float
from noetl_stream.jsonutil import JsonObject, JsonValue

# The one table of per-kind defaults; the tools read their fallbacks from here too.
KIND_DEFAULTS: Mapping[str, Mapping[str, float]] = {
    "http": {"timeout": 60.0},
    "python": {"timeout": 300.0},
    "shell": {"timeout": 300.0},
    "postgres": {"timeout": 300.0},
    "duckdb": {"timeout": 300.0},
}

SCOPED_KEYS = frozenset({"policy"})
LOOP_OWN_KEYS = frozenset({"mode", "max_in_flight", "exec", "frame"})
# The execution's own knobs (dsl/execution_limits.py): they bound the whole execution, so no step
# or task inherits them (a task given the execution's hour would lose its kind's default).
EXECUTOR_OWN_KEYS = frozenset({"concurrency", "timeout", "sla"})


@overload
def merge(*layers: Mapping[str, JsonValue]) -> JsonObject: ...


@overload
def merge(*layers: Mapping[str, object]) -> dict[str, object]: ...


def merge(*layers: Mapping[str, object]) -> JsonObject | dict[str, object]:
    """Overlay `layers` from outer to inner: mappings merge deeply, anything else replaces.
    The runtime merges rendered values with it too, not only the playbook's JSON (JSON layers
    give JSON: a mapping or a list of them stays one).
    """
    out: dict[str, object] = {}
    for layer in layers:
        for key, value in layer.items():
            if isinstance(value, Mapping) and isinstance(current := out.get(key), Mapping):
                out[key] = merge(current, value)
            elif isinstance(value, Mapping):
                out[key] = merge(value)  # a copy, so no layer shares structure with the result
            elif isinstance(value, list):
                out[key] = list(value)
            else:
                out[key] = value
    return out


def layer_of(spec: JsonValue, drop: frozenset[str] = SCOPED_KEYS) -> JsonObject:
    """The part of one scope's `spec` that inner scopes inherit."""
    if not isinstance(spec, Mapping):
        return {}
    return {k: v for k, v in spec.items() if k not in drop}


def kind_default(kind: str, key: str) -> float:
    return KIND_DEFAULTS[kind][key]


def effective_spec(task: Task, step: Step,
                   executor: Mapping[str, JsonValue]) -> JsonObject:
    loop_spec = step.loop.spec if step.loop is not None else {}
    spec = merge(KIND_DEFAULTS.get(task.kind, {}),
                 layer_of(executor.get("spec"), SCOPED_KEYS | EXECUTOR_OWN_KEYS),
                 layer_of(step.spec),
                 layer_of(loop_spec, SCOPED_KEYS | LOOP_OWN_KEYS),
                 layer_of(task.spec))
    seconds = duration_s(spec.get("timeout"))
    if seconds is not None:
        spec["timeout"] = seconds
    return spec


_DURATION = re.compile(r"^\s*(?P<n>\d+(?:\.\d*)?|\.\d+)\s*(?P<unit>ms|s|m|h|d)\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def duration_s(value: object) -> float | None:
    """A duration written as NoETL's step specs write it (`30s`, `5m`, `1h`, `500ms`, `1d`) in
    seconds; None for anything else (numbers are seconds already).
    """
    match = _DURATION.match(value) if isinstance(value, str) else None
    return float(match["n"]) * _UNIT_S[match["unit"]] if match else None


def apply(playbook: Playbook) -> Playbook:
    """The playbook with every task's `spec` replaced by its effective spec."""
    steps = tuple(
        step.model_copy(update={"tasks": tuple(
            _layered(task, step, playbook.executor) for task in step.tasks)})
        for step in playbook.steps)
    return playbook.model_copy(update={"steps": steps})


def _layered(task: Task, step: Step, executor: Mapping[str, JsonValue]) -> Task:
    """`task` with its effective spec, and so the storage tasks of its case `sink` rules."""
    rules = tuple(rule.model_copy(update={"sink": tuple(_layered(s, step, executor)
                                                         for s in rule.sink)}) if rule.sink else rule
                  for rule in task.rules)
    return task.model_copy(update={"spec": effective_spec(task, step, executor), "rules": rules})


def timeout_s(spec: Mapping[str, object]) -> float | None:
    """`spec.timeout` as seconds (a number, or a duration: `30s`), or None when absent or neither
    (http also takes a mapping of phases there, which its tool reads itself).
    """
    value = spec.get("timeout")
    if isinstance(value, bool):
        return None
    if (seconds := duration_s(value)) is not None:
        return seconds
    try:
        return as_float(value) if value is not None else None
    except (TypeError, ValueError):
        return None


def problems(playbook: Playbook) -> list[tuple[str | None, int | None, str, str]]:
    """(step, line, field, message) for effective specs no tool could run with."""
    out: list[tuple[str | None, int | None, str, str]] = []
    executor_spec = playbook.executor.get("spec")
    if executor_spec is not None and not isinstance(executor_spec, Mapping):
        out.append((None, None, "executor.spec", "executor.spec must be a mapping"))
    for step in playbook.steps:
        for task in step.tasks:
            value = task.spec.get("timeout")
            if value is None or (task.kind == "http" and isinstance(value, Mapping)):
                continue
            seconds = timeout_s(task.spec)
            if seconds is None or seconds <= 0:
                out.append((step.name, task.line, f"tool.{task.name}.spec.timeout",
                            "timeout must be a positive number of seconds or a duration "
                            f"(30s, 5m, 1h), got {value!r} "
                            "(set by this task's spec or one around it: step, loop)"))
    return out
