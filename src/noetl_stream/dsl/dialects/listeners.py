"""Compile the `case` of an `eval_mode: on_event` step (spec 001 §1.2) into `Step.listen` rules.

A listener runs no tool. It stays active, and the router tries its rules top-down on step.enter
and on every later event of its execution it sees: outcomes of other steps, external signals
(`signal.<name>`, published on `<prefix>.events.<id>.signal.<name>`) and `timer.fired`. The first
true rule applies its actions:

- `set`, `collect`: ctx writes (a listener has no iteration, so no `iter.` names);
- `timer: {after: 30s, name: timeout}`: set (or reset) a durable timer; `timer.fired` arrives
  later with `event.data.timer_id == 'timeout'`;
- `result`: the step's result when it leaves;
- `next`: leave along this rule's route (the step succeeds); `fail`: the step fails.

A rule without `next` or `fail` keeps the step listening. `call`, `retry` and `skip` mean nothing
without a tool and are errors.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from noetl_stream.dsl.dialects.case import ENTRY_KEYS, Report, _Compiler, _Entry
from noetl_stream.dsl.models import NextSpec, Rule, TimerSpec
from noetl_stream.dsl.source import line_of, plain, suggest
from noetl_stream.jsonutil import JsonObject, JsonValue

EVAL_MODES = ("on_entry", "on_event")
NOT_FOR_LISTENERS = frozenset({"call", "retry", "skip", "sink"})
_TOKEN = re.compile(r"^[A-Za-z0-9_-]+$")
_DURATION = re.compile(r"^\s*(?P<n>\d+(?:\.\d+)?)\s*(?P<unit>ms|s|m|h|d)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


@dataclass(frozen=True)
class ListenIR:
    """What an `on_event` step's `case` adds to the step's canonical form."""

    listen: tuple[Rule, ...]
    next: NextSpec


def duration_s(value: JsonValue) -> float | None:
    """`30`, `2.5`, `"500ms"`, `"30s"`, `"5m"`, `"1h"`, `"1d"` -> seconds; None if unreadable."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value) if value >= 0 else None
    match = _DURATION.match(str(value))
    if match is None:
        return None
    return float(match.group("n")) * _UNIT_S[match.group("unit") or "s"]


class _ListenCompiler(_Compiler):
    def actions(self, raw: JsonValue, line: int | None, fld: str) -> JsonObject:
        # `timer` is an action only listeners have: take it out before the case checks run.
        items = raw if isinstance(raw, list) else [raw]
        timer = None
        rest = []
        for item in items:
            if isinstance(item, dict) and "timer" in item:
                timer = item["timer"]
                item = {k: v for k, v in item.items() if k != "timer"}
            rest.append(item)
        merged = super().actions(rest if isinstance(raw, list) else rest[0], line, fld)
        if timer is not None:
            merged["timer"] = plain(timer)
        return merged

    def listen_entries(self, raw: JsonValue, line: int | None) -> list[_Entry]:
        if not isinstance(raw, list):
            self.report(line, "case must be a list of `{when, then}` entries", "case")
            return []
        out = []
        for index, item in enumerate(raw):
            item_line = line_of(raw, index) or line
            fld = f"case[{index}]"
            if not isinstance(item, dict) or "then" not in item:
                self.report(item_line, "a case entry is a mapping with `when` and `then`", fld)
                continue
            for key in item:
                if key not in ENTRY_KEYS:
                    self.report(line_of(item, key) or item_line, f'unknown key "{key}"'
                                f"{suggest(str(key), ENTRY_KEYS)}", f"{fld}.{key}")
            actions = self.actions(item["then"], line_of(item, "then") or item_line, fld)
            for action in sorted(NOT_FOR_LISTENERS & set(actions)):
                self.report(item_line, f'"{action}" does nothing in an `eval_mode: on_event` step '
                            "(it runs no tool); route to a step that does", f"{fld}.then.{action}")
            raw_when = item.get("when")
            when = None if raw_when is None else str(raw_when).strip()
            if when is not None and "{{" not in when and "{%" not in when:
                when = "{{ " + when + " }}"
            out.append(_Entry(index, item_line, when, frozenset(), actions))
        return out

    def timer(self, entry: _Entry) -> TimerSpec | None:
        raw = entry.actions.get("timer")
        fld = f"case[{entry.index}].then.timer"
        if raw is None:
            return None
        if not isinstance(raw, dict) or "after" not in raw:
            self.report(entry.line, "timer is a mapping: `after` (seconds or 30s, 5m, 1h) and "
                        "`name`", fld)
            return None
        extra = set(raw) - {"after", "name"}
        if extra:
            self.report(entry.line, f"unknown timer key {', '.join(sorted(extra))}; a timer has "
                        "`after` and `name`", fld)
        after = duration_s(raw["after"])
        if after is None:
            self.report(entry.line, f'timer `after` is seconds or a duration such as 30s, 5m, 1h, '
                        f'not "{raw["after"]}"', f"{fld}.after")
            return None
        name = str(raw.get("name") or "timer")
        if not _TOKEN.match(name):
            self.report(entry.line, f'timer `name` is letters, digits, "_" or "-", not "{name}"',
                        f"{fld}.name")
            return None
        return TimerSpec(name=name, after_s=after)


def compile_listeners(raw: JsonValue, *, step: str, line: int | None, next_spec: NextSpec,
                      report: Report) -> ListenIR:
    """The `listen` rules and arcs of an `on_event` step whose `case` is `raw`."""
    compiler = _ListenCompiler(step, report)
    rules: list[Rule] = []
    arcs = []
    for entry in compiler.listen_entries(raw, line):
        fields = compiler.fields(entry)
        if fields["set_iter"]:
            report(entry.line, "a listener has no iteration: write ctx names, not iter.<name>",
                   f"case[{entry.index}].then")
        route = f"case[{entry.index}]" if entry.actions.get("next") else None
        if route is not None:
            arcs += compiler.arcs(entry, route)
        rule = compiler.rule(entry, fields, do="fail" if entry.actions.get("fail") else "continue",
                             route=route, call={}, set_iter={}, timer=compiler.timer(entry))
        if rule is not None:
            rules.append(rule)
    if not rules:
        report(line, "an `eval_mode: on_event` step needs `case` rules to listen with", "case")
    return ListenIR(tuple(rules), next_spec.model_copy(update={"arcs": (*next_spec.arcs, *arcs)}))


def eval_mode_of(raw: JsonObject, spec: JsonValue, report: Report) -> str:
    """`eval_mode` from the step or its `spec` (spec 001 writes it under `spec`)."""
    value = raw.get("eval_mode")
    fld, line = "eval_mode", line_of(raw, "eval_mode")
    if value is None and isinstance(spec, dict) and spec.get("eval_mode") is not None:
        value, fld, line = spec["eval_mode"], "spec.eval_mode", line_of(spec, "eval_mode")
    if value is None:
        return "on_entry"
    if value not in EVAL_MODES:
        report(line, f'eval_mode is one of {", ".join(EVAL_MODES)}, not "{value}"'
               f"{suggest(str(value), EVAL_MODES)}", fld)
        return "on_entry"
    if value == "on_event":
        for key in ("tool", "loop"):
            if raw.get(key) is not None:
                report(line_of(raw, key), f"an `eval_mode: on_event` step listens and has no "
                       f"`{key}`; route to a step that runs it", key)
    return str(value)
