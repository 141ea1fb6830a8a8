"""Compile a step's `case: [{when, then}]` (spec 000, 004 §8) into the canonical IR.

Each entry is placed where its event happens; the events an entry can match are read from its
`when` (a conjunct `event.name == 'x'` or `event.name in [...]`; anything else may match every
event). The first true `when` wins at each event (004 §8.2).

- `step.enter`: `Step.enter` rules, run by the router before the step's first command (set,
  fail); `skip` becomes an admission rule.
- `call.done` / `call.error`: task policy rules on every task of the step, ahead of the task's
  own (call, retry, collect, set, result, next, fail).
- `step.exit`: `Step.exit` rules, run by the router when the step has succeeded, before its arcs
  (collect, set, result, next, fail).

Actions: `call` is `do: jump` to the task itself with config overrides; `retry` a retry rule;
`collect` and `set` ctx/iter writes; `result` a result override; `sink` storage tasks run when
the rule fires (`Rule.sink`, dsl/dialects/sink.py); `fail` is `do: fail`; `next`
gives the rule a route and adds one arc per target carrying that route (structural `next` is the
fallback when no route was chosen); a `next` in a call rule also ends the pipeline (`do: break`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from jinja2 import Environment, TemplateSyntaxError, nodes
from pydantic import ValidationError

from noetl_stream.dsl import noetl_refused
from noetl_stream.dsl.dialects.sink import ParseTask, rule_sinks
from noetl_stream.dsl.models import AdmitRule, Arc, Directive, NextSpec, Rule, Task
from noetl_stream.dsl.source import as_float, as_int, line_of, plain, suggest
from noetl_stream.dsl.templating import enclosed_expression
from noetl_stream.jsonutil import JsonObject, JsonValue

ENTER, DONE, ERROR, EXIT = "step.enter", "call.done", "call.error", "step.exit"
EVENTS = (ENTER, DONE, ERROR, EXIT)
ENTRY_KEYS = frozenset({"when", "then", "desc"})
ACTIONS = frozenset({"call", "retry", "collect", "sink", "set", "result", "next", "fail", "skip"})
RETRY_KEYS = frozenset({"max_attempts", "attempts", "initial_delay", "delay", "backoff_multiplier",
                        "max_delay"})
COLLECT_MODES = ("append", "extend", "replace")
# Which actions mean something at which event; an entry that can only match one event and uses
# an action that does nothing there is an error, not a silent no-op.
ALLOWED = {
    ENTER: frozenset({"set", "fail", "skip"}),
    DONE: frozenset({"call", "retry", "collect", "sink", "set", "result", "next", "fail"}),
    ERROR: frozenset({"call", "retry", "collect", "sink", "set", "result", "next", "fail"}),
    EXIT: frozenset({"collect", "set", "result", "next", "fail"}),
}
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_PARSER = Environment()

Report = Callable[[int | None, str, str], None]
"""report(line, message, field): record an error against the step being parsed."""


@dataclass(frozen=True)
class CaseIR:
    """What a step's `case` adds to the step's canonical form."""

    tasks: tuple[Task, ...]
    enter: tuple[Rule, ...]
    exit: tuple[Rule, ...]
    admit: tuple[AdmitRule, ...]
    next: NextSpec


@dataclass
class _Entry:
    index: int
    line: int | None
    when: str | None
    events: frozenset[str]
    actions: JsonObject


def events_named(when: str | None) -> frozenset[str] | None:
    """The event names `when` can be true for, or None when that cannot be read from the text."""
    if when is None:
        return None
    expr = enclosed_expression(when)
    if expr is None:
        return None
    try:
        template = _PARSER.parse("{{" + expr + "}}")
    except TemplateSyntaxError:
        return None
    body = template.body
    if len(body) != 1 or not isinstance(body[0], nodes.Output) or len(body[0].nodes) != 1:
        return None
    return _events_of(body[0].nodes[0])


def _events_of(node: nodes.Node) -> frozenset[str] | None:
    if isinstance(node, nodes.And):
        left, right = _events_of(node.left), _events_of(node.right)
        if left is None or right is None:
            return right if left is None else left
        return left & right
    if isinstance(node, nodes.Or):
        left, right = _events_of(node.left), _events_of(node.right)
        return None if left is None or right is None else left | right
    if isinstance(node, nodes.Compare) and len(node.ops) == 1:
        op = node.ops[0]
        if _is_event_name(node.expr) and op.op == "eq" and isinstance(op.expr, nodes.Const):
            return frozenset({str(op.expr.value)})
        if _is_event_name(op.expr) and op.op == "eq" and isinstance(node.expr, nodes.Const):
            return frozenset({str(node.expr.value)})
        if (_is_event_name(node.expr) and op.op == "in"
                and isinstance(op.expr, (nodes.List, nodes.Tuple))
                and all(isinstance(i, nodes.Const) for i in op.expr.items)):
            return frozenset(str(i.value) for i in op.expr.items if isinstance(i, nodes.Const))
    return None


def _is_event_name(node: nodes.Node) -> bool:
    return (isinstance(node, nodes.Getattr) and node.attr == "name"
            and isinstance(node.node, nodes.Name) and node.node.name == "event")


def _expression(text: JsonValue) -> str:
    """`response.data` or `{{ response.data }}` -> the bare expression."""
    source = str(text).strip()
    expr = enclosed_expression(source)
    return expr.strip() if expr is not None else source


class _Compiler:
    def __init__(self, step: str, report: Report, parse_task: ParseTask | None = None) -> None:
        self.step = step
        self.report = report
        self.parse_task = parse_task

    def entries(self, raw: JsonValue, line: int | None) -> list[_Entry]:
        if not isinstance(raw, list):
            self.report(line, "case must be a list of `{when, then}` entries", "case")
            return []
        out = []
        for index, item in enumerate(raw):
            entry = self.entry(item, index, line_of(raw, index) or line)
            if entry is not None:
                out.append(entry)
        return out

    def entry(self, item: JsonValue, index: int, line: int | None) -> _Entry | None:
        fld = f"case[{index}]"
        if not isinstance(item, dict) or "then" not in item:
            self.report(line, "a case entry is a mapping with `when` and `then`", fld)
            return None
        for key in item:
            if key not in ENTRY_KEYS:
                refused = noetl_refused.field_message("case", None, str(key))
                self.report(line_of(item, key) or line, refused or f'unknown key "{key}"'
                            f"{suggest(str(key), ENTRY_KEYS)}", f"{fld}.{key}")
        actions = self.actions(item["then"], line_of(item, "then") or line, fld)
        raw_when = item.get("when")
        when = None if raw_when is None else str(raw_when).strip()
        if when is not None and "{{" not in when and "{%" not in when:
            when = "{{ " + when + " }}"  # a bare expression, as spec 000 writes some guards
        named = events_named(when)
        events = frozenset(EVENTS) if named is None else named & frozenset(EVENTS)
        if named is not None and not events:
            self.report(line, f"`when` names no event this runtime emits ({', '.join(EVENTS)})",
                        f"{fld}.when")
        if len(events) == 1:
            (event,) = events
            for action in actions:
                if action not in ALLOWED[event]:
                    self.report(line, f'"{action}" does nothing on {event}; it works on '
                                f"{', '.join(e for e in EVENTS if action in ALLOWED[e])}",
                                f"{fld}.then.{action}")
        if "call" in actions and "retry" in actions:
            self.report(line, "`call` and `retry` in one rule: choose one", f"{fld}.then")
        if "sink" in actions and "retry" in actions:
            self.report(line, "`sink` and `retry` in one rule: a retried call has nothing to "
                        "store yet; sink in the rule that sees the final outcome", f"{fld}.then")
        return _Entry(index, line, when, events, actions)

    def actions(self, raw: JsonValue, line: int | None, fld: str) -> JsonObject:
        """`then` as a mapping of actions; a list of one-action mappings is merged in order."""
        merged: JsonObject = {}
        items = raw if isinstance(raw, list) else [raw]
        for item in items:
            if not isinstance(item, dict):
                self.report(line, "`then` is a mapping of actions (or a list of them)", f"{fld}.then")
                return {}
            merged.update(item)
        for key in list(merged):
            if key not in ACTIONS:
                self.report(line, f'unknown action "{key}"{suggest(str(key), ACTIONS)}',
                            f"{fld}.then.{key}")
                del merged[key]
        return {k: plain(v) for k, v in merged.items()}

    # -- actions -> IR fields ------------------------------------------------------------------
    def writes(self, entry: _Entry) -> tuple[JsonObject, JsonObject]:
        """`set` and `collect` as (set_ctx, set_iter)."""
        set_ctx: JsonObject = {}
        set_iter: JsonObject = {}
        fld = f"case[{entry.index}].then"
        raw_set = entry.actions.get("set")
        if raw_set is not None and not isinstance(raw_set, dict):
            self.report(entry.line, "`set` must be a mapping", f"{fld}.set")
        for key, value in (raw_set or {}).items() if isinstance(raw_set, dict) else ():
            scope, _, name = key.partition(".")
            if scope in ("ctx", "iter") and not name and isinstance(value, dict):
                (set_ctx if scope == "ctx" else set_iter).update(value)
            elif scope in ("ctx", "iter") and name:
                (set_ctx if scope == "ctx" else set_iter)[name] = value
            elif not name:
                set_ctx[key] = value  # a bare name is a ctx name
            else:
                self.report(entry.line, f'`set` writes ctx.<name>, iter.<name> or a bare name, '
                            f'not "{key}"', f"{fld}.set")
        collect = entry.actions.get("collect")
        if collect is not None:
            target = self.collect(collect, entry.line, f"{fld}.collect")
            if target is not None:
                scope, name, template = target
                (set_ctx if scope == "ctx" else set_iter)[name] = template
        return set_ctx, set_iter

    def collect(self, raw: JsonValue, line: int | None, fld: str) -> tuple[str, str, str] | None:
        """`{from, into, mode}` -> (scope, name, template) that appends to the current value."""
        if not isinstance(raw, dict) or raw.get("from") is None or not raw.get("into"):
            self.report(line, "collect needs `from` (an expression) and `into` (a name)", fld)
            return None
        scope, _, name = str(raw["into"]).partition(".")
        if not name:
            scope, name = "ctx", scope
        if scope not in ("ctx", "iter") or not _NAME.match(name):
            self.report(line, f'collect `into` is a name, ctx.<name> or iter.<name>, not '
                        f'"{raw["into"]}"', f"{fld}.into")
            return None
        mode = str(raw.get("mode", "append"))
        if mode not in COLLECT_MODES:
            self.report(line, f'collect mode "{mode}" is not one of {", ".join(COLLECT_MODES)}'
                        f"{suggest(mode, COLLECT_MODES)}", f"{fld}.mode")
            return None
        source = _expression(raw["from"])
        current = f"({scope}[{name!r}] or [])"
        if mode == "replace":
            template = "{{ " + source + " }}"
        elif mode == "extend":
            template = "{{ " + current + " + (((" + source + ") or []) | list) }}"
        else:
            template = "{{ " + current + " + [" + source + "] }}"
        return scope, name, template

    def result(self, entry: _Entry) -> JsonValue:
        raw = entry.actions.get("result")
        if isinstance(raw, dict) and set(raw) == {"from"}:
            return "{{ " + _expression(raw["from"]) + " }}"
        return raw

    def retry(self, entry: _Entry) -> JsonObject:
        raw = entry.actions.get("retry")
        fld = f"case[{entry.index}].then.retry"
        if raw is None:
            return {}
        if raw is True:
            raw = {}
        if not isinstance(raw, dict):
            self.report(entry.line, "retry is a mapping: max_attempts, initial_delay, "
                        "backoff_multiplier", fld)
            return {}
        for key in raw:
            if key not in RETRY_KEYS:
                self.report(entry.line, f'unknown retry key "{key}"{suggest(str(key), RETRY_KEYS)}',
                            f"{fld}.{key}")
        multiplier = raw.get("backoff_multiplier")
        try:
            return {"attempts": as_int(raw.get("max_attempts", raw.get("attempts", 3))),
                    "delay": as_float(raw.get("initial_delay", raw.get("delay", 0)) or 0),
                    "backoff": "exponential" if multiplier is not None else "fixed",
                    "multiplier": as_float(multiplier) if multiplier is not None else None,
                    "max_delay": raw.get("max_delay")}
        except (TypeError, ValueError):
            self.report(entry.line, "retry numbers must be numbers", fld)
            return {}

    def arcs(self, entry: _Entry, route: str) -> list[Arc]:
        raw = entry.actions.get("next")
        fld = f"case[{entry.index}].then.next"
        items = raw if isinstance(raw, list) else [raw]
        arcs = []
        for item in items:
            if isinstance(item, str):
                arcs.append(Arc(step=item, route=route, line=entry.line))
            elif isinstance(item, dict) and item.get("step"):
                extra = set(item) - {"step", "args", "desc"}
                if extra:
                    self.report(entry.line, f"a `next` target has `step` and `args`, not "
                                f"{', '.join(sorted(extra))}", fld)
                args = item.get("args") or {}
                if not isinstance(args, dict):
                    self.report(entry.line, "`args` must be a mapping", f"{fld}.args")
                    args = {}
                arcs.append(Arc(step=str(item["step"]), args=args, route=route, line=entry.line))
            else:
                self.report(entry.line, "`next` is a step name or a list of `{step, args}`", fld)
        return arcs

    def fields(self, entry: _Entry) -> dict[str, object]:
        """The Rule fields an entry's actions give wherever it is placed (computed once)."""
        set_ctx, set_iter = self.writes(entry)
        call = entry.actions.get("call")
        if call is not None and not isinstance(call, dict):
            self.report(entry.line, "`call` is a mapping of tool fields to override",
                        f"case[{entry.index}].then.call")
            call = None
        sink: tuple[Task, ...] = ()
        if entry.actions.get("sink") is not None and self.parse_task is not None:
            sink = rule_sinks(entry.actions["sink"], step=self.step, index=entry.index,
                              line=entry.line, report=self.report, parse_task=self.parse_task)
        return {"when": entry.when, "set_ctx": set_ctx, "set_iter": set_iter, "call": call or {},
                "result": self.result(entry), "sink": sink, "line": entry.line,
                **self.retry(entry)}

    def rule(self, entry: _Entry, fields: Mapping[str, object], **kwargs: object) -> Rule | None:
        try:
            return Rule(**{**fields, **kwargs})
        except ValidationError as exc:
            self.report(entry.line, f"case rule is invalid: {exc.errors()[0]['msg']}",
                        f"case[{entry.index}].then")
            return None


def _call_directive(entry: _Entry, ends: Directive, route: str | None) -> Directive:
    """What a call rule of `entry` does: fail, retry, re-run the task (`call`), end the step for
    its `next`, or continue.
    """
    if ends != "continue":
        return ends
    if entry.actions.get("retry") is not None:
        return "retry"
    if entry.actions.get("call") is not None:
        return "jump"
    if route is not None:
        return "break"  # a `next` ends the step: the route decides where it goes
    return ends


def compile_case(raw: JsonValue, *, step: str, line: int | None, tasks: tuple[Task, ...],
                 next_spec: NextSpec, report: Report,
                 parse_task: ParseTask | None = None) -> CaseIR:
    """The step's tasks, entry/exit rules, admission rules and arcs with `raw` compiled in;
    `parse_task` parses the tools of `sink` actions.
    """
    compiler = _Compiler(step, report, parse_task)
    enter: list[Rule] = []
    exit_rules: list[Rule] = []
    admit: list[AdmitRule] = []
    call_rules: list[tuple[_Entry, dict[str, object]]] = []  # per entry and event: Rule fields
    arcs: list[Arc] = []
    for entry in compiler.entries(raw, line):
        fields = compiler.fields(entry)
        route = f"case[{entry.index}]" if entry.actions.get("next") else None
        if route is not None:
            arcs += compiler.arcs(entry, route)
        ends: Directive = "fail" if entry.actions.get("fail") else "continue"
        if ENTER in entry.events:
            if entry.actions.get("skip"):
                admit.append(AdmitRule(when=entry.when, allow=False))
            elif (rule := compiler.rule(entry, fields, do=ends, event=ENTER, set_iter={},
                                        call={}, result=None, sink=())) is not None:
                enter.append(rule)
        do = _call_directive(entry, ends, route)
        call_rules += [(entry, {**fields, "do": do, "event": event, "route": route})
                       for event in (ERROR, DONE) if event in entry.events]
        if EXIT in entry.events and (rule := compiler.rule(entry, fields, do=ends, event=EXIT,
                                                           call={}, set_iter={}, route=route,
                                                           sink=())) is not None:
            exit_rules.append(rule)
    compiled = []
    for task in tasks:
        rules = []
        for entry, fields in call_rules:
            # `call` re-runs the task the outcome came from, with the overrides merged in.
            to = task.name if fields["do"] == "jump" else None
            if (rule := compiler.rule(entry, fields, to=to)) is not None:
                rules.append(rule)
        compiled.append(task.model_copy(update={"rules": (*rules, *task.rules),
                                                "has_policy": task.has_policy or bool(rules)}))
    nxt = next_spec.model_copy(update={"arcs": (*next_spec.arcs, *arcs)})
    return CaseIR(tuple(compiled), tuple(enter), tuple(exit_rules), tuple(admit), nxt)
