"""Compile the `retry:` clause (spec 004 §7, 001 §4) and `poll:` (001 §4.3) into the canonical IR.

A clause becomes at most two task policy rules, placed ahead of the task's own rules:

- with `stop_when`: `{when: stop_when and not success, do: fail}`, then
- `{when: <retry guard>, do: retry}` with the clause's attempts, backoff, jitter and scope.

The retry guard is `retry_when` (default `not success`), and `not stop_when` when there is one
(004 §7.2: re-execute until `stop_when` holds); a clause with only `stop_when` retries while it
is false, even after a successful call. Rules with a `scope` read the retry context names
(`attempt`, `max_attempts`, `status_code`, `error`, `success`, `result`, `data`) in their guards.

Scopes: `tool` (and `step`, which 001 §4.1 reads as tool retry inherited from the step) retry the
task; `chain` re-runs the whole pipeline from its first task. A step-level clause applies to every
task without a clause of its own (001 §4.2). `poll:` compiles to `Task.poll`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import TypeVar, cast

from pydantic import ValidationError

from noetl_stream.dsl.models import Backoff, PollSpec, RetryScope, Rule, Task
from noetl_stream.dsl.source import as_float, suggest
from noetl_stream.dsl.templating import enclosed_expression
from noetl_stream.jsonutil import JsonObject, JsonValue

RETRY_KEYS = frozenset({"max_attempts", "attempts", "initial_delay", "delay", "backoff_multiplier",
                        "backoff", "max_delay", "max_delay_seconds", "jitter", "retry_when",
                        "stop_when", "scope", "on", "retry_on", "retry_on_status",
                        "backoff_seconds"})
BACKOFF_KEYS = frozenset({"type", "delay_seconds", "delay", "initial_delay", "multiplier",
                          "backoff_multiplier", "max_delay_seconds", "max_delay", "jitter"})
BACKOFF_TYPES = ("exponential", "linear", "fixed", "none")
SCOPES = ("tool", "chain", "step")
POLL_KEYS = frozenset({"until", "interval", "max_attempts", "deadline"})
_DURATION = re.compile(r"^\s*(?P<n>\d+(?:\.\d*)?|\.\d+)\s*(?P<unit>ms|s|m|h)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}

Report = Callable[[int | None, str, str], None]
"""report(line, message, field): record an error against the step being parsed."""


_Name = TypeVar("_Name", str, int)


class _Invalid(ValueError):
    """A clause value that cannot be read; carries the field it belongs to."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def seconds(value: JsonValue, field: str) -> float:
    """A duration: a number of seconds or text such as `5s`, `250ms`, `2m`, `1h`."""
    if isinstance(value, bool):
        raise _Invalid(field, "must be a duration such as 5, 5s, 250ms or 2m")
    if isinstance(value, int | float):
        number = float(value)
    else:
        match = _DURATION.match(str(value))
        if match is None:
            raise _Invalid(field, f"{value!r} is not a duration such as 5, 5s, 250ms or 2m")
        number = float(match.group("n")) * _UNIT_S[match.group("unit") or "s"]
    if number < 0:
        raise _Invalid(field, "a duration cannot be negative")
    return number


def _expression(text: JsonValue, field: str) -> str:
    """`{{ expr }}` (or a bare `expr`) -> `expr`; a guard is one expression so it can be combined."""
    source = str(text).strip()
    expr = enclosed_expression(source)
    if expr is None:
        if "{{" in source or "{%" in source:
            raise _Invalid(field, "must be one `{{ expression }}` so it can be combined with the "
                           "other conditions")
        return source
    return expr.strip()


def _count(value: JsonValue, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise _Invalid(field, "must be a whole number of attempts, the first included")
    try:
        count = int(value)
    except ValueError:
        raise _Invalid(field, f"{value!r} is not a whole number") from None
    if count < 1:
        raise _Invalid(field, "counts every attempt, the first included: at least 1")
    return count


def _unknown(raw: JsonObject, known: frozenset[str], field: str) -> None:
    for key in raw:
        if key not in known:
            raise _Invalid(f"{field}.{key}", f'unknown key "{key}"{suggest(str(key), known)}')


def _backoff(raw: JsonObject, field: str) -> JsonObject:
    """The Rule fields of the clause's backoff: 004's flat keys and 001's `backoff:` block."""
    block = raw.get("backoff")
    if isinstance(block, str):
        block = {"type": block}
    elif isinstance(block, int | float) and not isinstance(block, bool):
        block = {"type": "fixed", "delay": block}  # NoETL's fixtures: `backoff: 5` (seconds)
    if block is None:
        block = {}
    if not isinstance(block, dict):
        raise _Invalid(f"{field}.backoff", "is a type (exponential | linear | fixed) or a mapping "
                       "{type, delay_seconds, max_delay_seconds, jitter}")
    _unknown(block, BACKOFF_KEYS, f"{field}.backoff")
    merged = {**raw, **block}

    def pick(*names: str) -> JsonValue:
        return next((merged[n] for n in names if merged.get(n) is not None), None)

    multiplier = pick("multiplier", "backoff_multiplier")
    kind = block.get("type") or ("exponential" if multiplier is not None else "fixed")
    if kind not in BACKOFF_TYPES:
        raise _Invalid(f"{field}.backoff.type", f'backoff type "{kind}" is not one of '
                       "exponential, linear, fixed")
    delay = pick("delay_seconds", "initial_delay", "delay", "backoff_seconds")
    max_delay = pick("max_delay_seconds", "max_delay")
    jitter = pick("jitter")
    if jitter is not None and not isinstance(jitter, bool):
        raise _Invalid(f"{field}.jitter", "is true or false")
    try:
        factor = None if multiplier is None else as_float(multiplier)
    except (TypeError, ValueError):
        raise _Invalid(f"{field}.backoff_multiplier", "must be a number") from None
    return {"backoff": cast(Backoff, kind), "multiplier": factor,
            "delay": 0.0 if delay is None else seconds(delay, f"{field}.initial_delay"),
            "max_delay": None if max_delay is None else seconds(max_delay, f"{field}.max_delay"),
            "jitter": bool(jitter)}


def _names(value: JsonValue, field: str, kind: type[_Name]) -> list[_Name]:
    items = value if isinstance(value, list) else [value]
    names = [i for i in items if isinstance(i, kind) and not isinstance(i, bool)]
    if not items or len(names) != len(items):
        raise _Invalid(field, f"is a list of {'error kinds' if kind is str else 'HTTP statuses'}")
    return names


def _retry_on(raw: JsonObject, field: str) -> str | None:
    """`retry_on: [timeout, connection_error]` (error kinds; `_error` spelled or not) and
    `retry_on_status: [429, 503]`, as NoETL's playbooks write them: a failed call is retried only
    when one of them matches. None when neither is given.
    """
    tests = []
    if raw.get("retry_on") is not None:
        kinds = sorted({spelling for name in _names(raw["retry_on"], f"{field}.retry_on", str)
                        for spelling in (name, name.removesuffix("_error"))})
        tests.append(f"(error.kind if error else none) in {kinds!r}")
    if raw.get("retry_on_status") is not None:
        statuses = _names(raw["retry_on_status"], f"{field}.retry_on_status", int)
        tests.append(f"status_code in {sorted(set(statuses))!r}")
    return f"({' or '.join(tests)})" if tests else None


def _rules(raw: JsonValue, line: int | None, field: str) -> tuple[Rule, ...]:
    if raw is True or (isinstance(raw, int) and not isinstance(raw, bool)):
        raw = {} if raw is True else {"max_attempts": raw}
    if not isinstance(raw, dict):
        raise _Invalid(field, "retry is a mapping: max_attempts, initial_delay, "
                       "backoff_multiplier, backoff, retry_when, stop_when, scope")
    _unknown(raw, RETRY_KEYS, field)
    scope = raw.get("scope", "tool")
    if scope not in SCOPES:
        raise _Invalid(f"{field}.scope", f'scope "{scope}" is not tool or chain')
    if raw.get("on", "error") != "error":
        raise _Invalid(f"{field}.on", "only `on: error` is supported; use `retry_when` for "
                       "other conditions and `poll:` to wait for a result")
    attempts = _count(raw.get("max_attempts", raw.get("attempts", 3)), f"{field}.max_attempts")
    timing = _backoff(raw, field)
    rule_scope: RetryScope = "chain" if scope == "chain" else "tool"
    stop = raw.get("stop_when")
    stop_expr = None if stop is None else _expression(stop, f"{field}.stop_when")
    retry_when = raw.get("retry_when")
    guard = "not success" if retry_when is None else f"({_expression(retry_when, f'{field}.retry_when')})"
    if (only := _retry_on(raw, field)) is not None:
        guard = f"{guard} and {only}"
    if stop_expr is not None:
        guard = f"not ({stop_expr})" if retry_when is None else f"{guard} and not ({stop_expr})"
    rules = []
    if stop_expr is not None:
        rules.append(Rule(when=f"{{{{ ({stop_expr}) and not success }}}}", do="fail",
                          attempts=attempts, scope=rule_scope, line=line))
    rules.append(Rule(when=f"{{{{ {guard} }}}}", do="retry", attempts=attempts, scope=rule_scope,
                      line=line, **timing))
    return tuple(rules)


def compile_retry(raw: JsonValue, *, line: int | None, field: str, report: Report) -> tuple[Rule, ...]:
    """The policy rules of one `retry:` clause; () after reporting when it cannot be read."""
    try:
        return _rules(raw, line, field)
    except _Invalid as exc:
        report(line, str(exc), exc.field)
    except ValidationError as exc:
        report(line, f"retry is invalid: {exc.errors()[0]['msg']}", field)
    return ()


def compile_poll(raw: JsonValue, *, line: int | None, field: str, report: Report) -> PollSpec | None:
    """`poll: {until, interval, max_attempts, deadline}`; None after reporting a problem."""
    try:
        if not isinstance(raw, dict) or raw.get("until") is None:
            raise _Invalid(field, "poll is a mapping with `until` (and interval, max_attempts, "
                           "deadline)")
        _unknown(raw, POLL_KEYS, field)
        until = _expression(raw["until"], f"{field}.until")
        max_attempts = raw.get("max_attempts")
        deadline = raw.get("deadline")
        return PollSpec(
            until=f"{{{{ {until} }}}}",
            interval=seconds(raw.get("interval", 0), f"{field}.interval"),
            max_attempts=None if max_attempts is None else _count(max_attempts,
                                                                  f"{field}.max_attempts"),
            deadline=None if deadline is None else seconds(deadline, f"{field}.deadline"),
            line=line)
    except _Invalid as exc:
        report(line, str(exc), exc.field)
    except ValidationError as exc:
        report(line, f"poll is invalid: {exc.errors()[0]['msg']}", field)
    return None


def has_retry_clause(task: Task) -> bool:
    return any(rule.scope is not None for rule in task.rules)


def inherit_retry(tasks: Iterable[Task], rules: tuple[Rule, ...]) -> list[Task]:
    """A step-level clause's rules on every task that has no clause of its own (001 §4.2)."""
    if not rules:
        return list(tasks)
    return [task if has_retry_clause(task)
            else task.model_copy(update={"rules": (*rules, *task.rules)}) for task in tasks]
