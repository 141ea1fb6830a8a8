"""Compile the spec 001 step form into the canonical IR: `case_mode`, `branch_order`,
`next_policy`, case entries with `priority` and `else`, `then:` as a list of named tasks
(`{tool, retry}`) and `next: {to: [...], policy}` with plain or templated step names.

The case is evaluated once, on the outcome of the step's last tool call (spec 001 §1.2
`on_entry`). Every branch's tasks are appended to the step's pipeline in execution order, and
task policy rules steer through them:

- the last entry task gets one rule per branch, first true wins: `do: jump` to the branch's first
  task. In `inclusive` mode that rule also records, as pipeline locals `_case_<n>`, which later
  branches were true at that same moment, so the selection is made once (the "firing set");
- the last task of a branch jumps to the next selected branch, or ends the pipeline
  (`do: break`); when the branch has a `next`, that rule carries its route, and the first route
  reached wins (spec 001 §2.3). Under `end_step` a `next` ends the step at once;
- a branch without tasks gets a `noop` task that keeps the previous result, so every branch can
  be jumped to.

A `next` target becomes an `Arc` with the branch's route; a templated name (`"{{ 'a' if x else
'b' }}"`) becomes one guarded arc per string constant it can give. `Step.case` keeps the settings
the router needs to publish `case.evaluated`, `next.evaluated` and `case.branch.suppressed`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from jinja2 import Environment, TemplateSyntaxError, nodes

from noetl_stream.dsl.dialects.case import ACTIONS as CASE_ACTIONS
from noetl_stream.dsl.dialects.listeners import duration_s
from noetl_stream.dsl.dialects.retry import compile_retry
from noetl_stream.dsl.guard_exprs import (
    CALL_OK,
    STEP_NOT_FAILED,
    And,
    Compare,
    Concat,
    Const,
    Group,
    IfElse,
    ListOf,
    Name,
    Source,
    template,
)
from noetl_stream.dsl.models import Arc, CaseBranch, CaseSpec, NextSpec, Rule, Task
from noetl_stream.dsl.source import as_int, line_of, plain, suggest
from noetl_stream.dsl.templating import enclosed_expression
from noetl_stream.jsonutil import JsonObject, JsonValue

KNOBS = ("case_mode", "branch_order", "next_policy")
MODES = ("exclusive", "inclusive")
ORDERS = ("source", "priority")
POLICIES = ("end_step", "break_chain", "defer")
ENTRY_KEYS = frozenset({"when", "then", "priority", "desc", "else"})
NEXT_KEYS = frozenset({"to", "policy", "spec", "priority"})
TARGET_KEYS = frozenset({"step", "args", "with", "desc"})
TASK_KEYS = frozenset({"tool", "retry", "desc"})
OK = template(CALL_OK)
_PARSER = Environment()

Report = Callable[[int | None, str, str], None]
"""report(line, message, field): record an error against the step being parsed."""
ParseTask = Callable[[str, JsonValue, int | None], Task | None]
"""parse_task(name, tool body, line): the parser's own task parsing."""


def _is_target(item: JsonValue) -> bool:
    """A `then` item `{step: name}` (NoETL's CLI writes targets there), not a named task."""
    return isinstance(item, dict) and isinstance(item.get("step"), str) and \
        set(item) <= {"step", "args", "when"}


@dataclass(frozen=True)
class Spec001IR:
    """What the spec 001 form gives the step."""

    tasks: tuple[Task, ...]
    next: NextSpec
    case: CaseSpec


@dataclass
class _Branch:
    position: int  # index in `case:`
    name: str
    line: int | None
    when: str | None  # None for `else`
    priority: int
    tasks: list[Task] = field(default_factory=list)
    retries: dict[str, Rule] = field(default_factory=dict)
    next: JsonObject | None = None
    policy: str = "end_step"
    next_priority: int = 0  # `next.priority`, under `defer`
    delay: float | None = None  # `next.spec.delay`, seconds

    @property
    def route(self) -> str | None:
        return f"case[{self.position}]" if self.next is not None else None


def uses_spec001(raw_step: JsonObject) -> bool:
    """True when a step is written in the spec 001 form rather than the spec 000/004 `case`."""
    spec = raw_step.get("spec")
    if any(k in raw_step for k in KNOBS) or (isinstance(spec, dict) and any(k in spec for k in KNOBS)):
        return True
    case = raw_step.get("case")
    if not isinstance(case, list):
        return False
    for entry in case:
        if not isinstance(entry, dict):
            continue
        if "else" in entry or "priority" in entry:
            return True
        then = entry.get("then")
        for item in then if isinstance(then, list) else []:
            if not isinstance(item, dict):
                continue
            if any(k not in CASE_ACTIONS for k in item):
                return True  # a named task
            if isinstance(nxt := item.get("next"), dict) and "to" in nxt:
                return True
    return False


def single_expression(when: str) -> str | None:
    """The expression of a `when` that is one `{{ expression }}`, stripped; None otherwise."""
    expr = enclosed_expression(when)
    if expr is None or "{{" in expr or "}}" in expr:
        return None
    return expr.strip()


def _choices(node: nodes.Node) -> list[str] | None:
    """The string constants an expression can give, or None when it can give anything else."""
    if isinstance(node, nodes.Const) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, nodes.CondExpr) and node.expr2 is not None:
        left, right = _choices(node.expr1), _choices(node.expr2)
        return None if left is None or right is None else left + [c for c in right if c not in left]
    return None


def target_arcs(raw: JsonValue, *, route: str | None, line: int | None, fld: str,
                report: Report, delay: float | None = None) -> list[Arc]:
    """`to: [{step, args}]` (or names) as arcs with `route`; a templated name becomes one arc
    per string constant it can give, guarded by the template's value.
    """
    if not isinstance(raw, list) or not raw:
        report(line, "`next.to` is a non-empty list of `{step: name}` targets", fld)
        return []
    arcs: list[Arc] = []
    for index, item in enumerate(raw):
        where = f"{fld}[{index}]"
        target = _target(item, line, where, report)
        if target is None:
            continue
        name, args = target
        if "{{" not in name and "{%" not in name:
            arcs.append(Arc(step=name, args=args, route=route, delay=delay, line=line))
            continue
        expr = single_expression(name)
        choices = _expression_choices(expr) if expr is not None else None
        if not choices:
            report(line, "a templated step name must choose among step names written as string "
                   "constants, e.g. \"{{ 'ok' if result.valid else 'failed' }}\"", f"{where}.step")
            continue
        for choice in choices:
            # Only on success, like an unguarded arc: a failure is routed by arcs that say so.
            when = template(And((STEP_NOT_FAILED,
                                 Compare(Group(Source(str(expr))), "==", Const(choice)))))
            arcs.append(Arc(step=choice, when=when, args=args, route=route, delay=delay,
                            line=line))
    return arcs


def _target(item: JsonValue, line: int | None, where: str,
            report: Report) -> tuple[str, JsonObject] | None:
    """One `next.to` entry as (step name, args); None after reporting when it cannot be read."""
    if isinstance(item, str):
        item = {"step": item}
    if not isinstance(item, dict) or not item.get("step"):
        report(line, "a `next.to` target is `{step: name, args: {...}}`", where)
        return None
    for key in item:
        if key not in TARGET_KEYS:
            report(line, f'unknown key "{key}"{suggest(str(key), TARGET_KEYS)}', f"{where}.{key}")
    args = plain(item.get("args") or item.get("with") or {})
    if not isinstance(args, dict):
        report(line, "`args` must be a mapping", f"{where}.args")
        args = {}
    return str(item["step"]), args


def _expression_choices(expr: str) -> list[str] | None:
    """The string constants one expression can give (see `_choices`)."""
    try:
        body = _PARSER.parse("{{" + expr + "}}").body
    except TemplateSyntaxError:
        return None
    if len(body) == 1 and isinstance(body[0], nodes.Output) and len(body[0].nodes) == 1:
        return _choices(body[0].nodes[0])
    return None


def structural_next(raw: JsonObject, *, line: int | None, report: Report) -> NextSpec:
    """A step's own `next: {to: [...]}`: every target fires (a fork)."""
    for key in raw:
        if key not in NEXT_KEYS - {"policy", "priority"}:
            report(line, f'unknown key "{key}" in `next`{suggest(str(key), NEXT_KEYS)}',
                   f"next.{key}")
    delay = next_delay(raw.get("spec"), line, "next.spec", report)
    return NextSpec(mode="inclusive",
                    arcs=tuple(target_arcs(raw.get("to"), route=None, line=line, fld="next.to",
                                           report=report, delay=delay)))


def next_delay(spec: JsonValue, line: int | None, fld: str, report: Report) -> float | None:
    """`next.spec`: its `delay` in seconds (`30`, `500ms`, `30s`, `5m`), None without one."""
    if spec is None:
        return None
    if not isinstance(spec, dict):
        report(line, "`next.spec` is a mapping", fld)
        return None
    for key in spec:
        if key != "delay":
            report(line, f'unknown key "{key}" in `next.spec`', f"{fld}.{key}")
    if spec.get("delay") is None:
        return None
    delay = duration_s(spec["delay"])
    if delay is None:
        report(line, f'`next.spec.delay` is seconds or a duration such as 500ms, 30s, 5m, not '
               f'"{spec["delay"]}"', f"{fld}.delay")
    return delay


class _Compiler:
    def __init__(self, step: str, report: Report, parse_task: ParseTask) -> None:
        self.step = step
        self.report = report
        self.parse_task = parse_task
        self.retries: dict[str, int] = {}  # task -> how many leading rules its `retry` gave

    def knob(self, raw_step: JsonObject, name: str, allowed: tuple[str, ...]) -> str:
        spec = raw_step.get("spec")
        value = spec.get(name) if isinstance(spec, dict) and name in spec else raw_step.get(name)
        if value is None:
            return allowed[0]
        if value not in allowed:
            self.report(line_of(raw_step, name) or line_of(raw_step, "spec"),
                        f'{name} "{value}" is not one of {", ".join(allowed)}'
                        f"{suggest(str(value), allowed)}", f"spec.{name}")
            return allowed[0]
        return str(value)

    def branches(self, raw: JsonValue, line: int | None, policy: str) -> list[_Branch]:
        if not isinstance(raw, list):
            self.report(line, "case must be a list of `{when, then}` entries", "case")
            return []
        out: list[_Branch] = []
        for index, entry in enumerate(raw):
            where = f"case[{index}]"
            at = line_of(raw, index) or line
            if not isinstance(entry, dict):
                self.report(at, "a case entry is `{when, then}` or `{else: [...]}`", where)
                continue
            for key in entry:
                if key not in ENTRY_KEYS:
                    self.report(line_of(entry, key) or at, f'unknown key "{key}"'
                                f"{suggest(str(key), ENTRY_KEYS)}", f"{where}.{key}")
            if "else" in entry and ("when" in entry or "then" in entry):
                self.report(line_of(entry, "else") or at, "NoETL form not run here: `else:` beside "
                            "`when`/`then` in one case entry (NoETL's CLI runtime); instead, write "
                            "the else as its own last entry `{else: {then: [...]}}`",
                            f"{where}.else")
                continue
            if "else" in entry:
                body = entry["else"]
                then = body.get("then") if isinstance(body, dict) else body
                if any(e.when is None for e in out) or index != len(raw) - 1:
                    self.report(at, "`else` is the last case entry, and there is one", where)
                branch = _Branch(index, "else", at, None, 0)
            else:
                if entry.get("when") is None or "then" not in entry:
                    self.report(at, "a case entry needs `when` and `then`", where)
                    continue
                when = str(entry["when"]).strip()
                if "{{" not in when and "{%" not in when:
                    when = template(Source(when))
                try:
                    priority = as_int(entry.get("priority", 0))
                except (TypeError, ValueError):
                    self.report(at, "`priority` is a whole number", f"{where}.priority")
                    priority = 0
                then = entry["then"]
                branch = _Branch(index, f"case_{index}", at, when, priority)
            branch.policy = policy
            self.chain(branch, then, policy, where)
            out.append(branch)
        return out

    def chain(self, branch: _Branch, raw: JsonValue, policy: str, where: str) -> None:
        items = raw if isinstance(raw, list) else [raw]
        targets = [item for item in items if _is_target(item)]
        if targets:  # NoETL's CLI: `then: [{step: b}]` goes to those steps
            items = [item for item in items if not _is_target(item)] + [{"next": {"to": targets}}]
        after_next: list[str] = []
        for index, item in enumerate(items):
            fld = f"{where}.then[{index}]"
            if not isinstance(item, dict) or len(item) != 1:
                self.report(branch.line, "each `then` item is one named task `{name: {tool, "
                            "retry}}` or `next: {to: [...]}`", fld)
                continue
            ((key, body),) = item.items()
            key = str(key)
            if key == "next":
                if branch.next is not None:
                    self.report(branch.line, "one `next` per chain", fld)
                    continue
                branch.next, branch.policy = self.next_action(body, policy, fld, branch.line)
                branch.delay = next_delay(branch.next.get("spec"), branch.line,
                                          f"{fld}.next.spec", self.report)
                branch.next_priority = self.next_priority(branch.next, branch.policy, fld,
                                                          branch.line)
            elif key == "sink":
                self.report(branch.line, 'the "sink" task is not supported by this version of '
                            "noetl-stream yet; write it as a named task with `tool:`", fld)
            elif key in CASE_ACTIONS:
                self.report(branch.line, f'"{key}" is a spec 000/004 case action; in the spec 001 '
                            "form `then` holds named tasks and `next`", fld)
            else:
                task = self.task(key, body, branch.line, fld)
                if task is None:
                    continue
                if branch.next is not None and branch.policy != "defer":
                    after_next.append(key)
                    continue
                branch.tasks.append(task)
        if after_next:
            self.report(branch.line, f"task(s) {', '.join(after_next)} come after `next` and never "
                        f"run under next_policy {branch.policy}; move them before `next` or use "
                        "next_policy: defer", f"{where}.then")

    def next_action(self, raw: JsonValue, policy: str, fld: str, line: int | None
                    ) -> tuple[JsonObject, str]:
        if isinstance(raw, list):
            raw = {"to": raw}  # `next: [{step}]` as NoETL writes it today
        if not isinstance(raw, dict):
            self.report(line, "`next` is `{to: [{step: name}], policy: ...}`", fld)
            return {"to": []}, policy
        for key in raw:
            if key not in NEXT_KEYS:
                self.report(line, f'unknown key "{key}" in `next`{suggest(str(key), NEXT_KEYS)}',
                            f"{fld}.next.{key}")
        own = raw.get("policy", policy)
        if own not in POLICIES:
            self.report(line, f'next policy "{own}" is not one of {", ".join(POLICIES)}',
                        f"{fld}.next.policy")
            own = policy
        return plain(raw), str(own)

    def next_priority(self, raw: JsonObject, policy: str, fld: str, line: int | None) -> int:
        """`next.priority`: chooses among the routes reached under `next_policy: defer`."""
        if raw.get("priority") is None:
            return 0
        if policy != "defer":
            self.report(line, f"`next.priority` chooses among deferred routes (next_policy: defer); "
                        f"under {policy} the first `next` reached wins", f"{fld}.next.priority")
            return 0
        value = raw["priority"]
        if isinstance(value, bool) or not isinstance(value, int):
            self.report(line, "`next.priority` is a whole number", f"{fld}.next.priority")
            return 0
        return value

    def task(self, name: str, body: JsonValue, line: int | None, fld: str) -> Task | None:
        if not isinstance(body, dict) or not isinstance(body.get("tool"), dict):
            self.report(line, f'task "{name}" needs `tool: {{kind: ...}}`', f"{fld}.{name}")
            return None
        for key in body:
            if key not in TASK_KEYS:
                self.report(line, f'unknown key "{key}"{suggest(str(key), TASK_KEYS)}',
                            f"{fld}.{name}.{key}")
        task = self.parse_task(name, body["tool"], line_of(body, "tool") or line)
        if task is None:
            return None
        if body.get("retry") is None:
            return task
        retry = compile_retry(body["retry"], line=line, field=f"{fld}.{name}.retry",
                              report=self.report)
        if any(rule.scope == "chain" for rule in retry):
            self.report(line, "`scope: chain` restarts the step's whole pipeline; a task in `then` "
                        "retries itself (`scope: tool`)", f"{fld}.{name}.retry.scope")
        self.retries[name] = len(retry)
        return task.model_copy(update={"rules": (*retry, *task.rules)})

    # -- rules ---------------------------------------------------------------------------------
    def selectors(self, branch: _Branch, later: list[_Branch], inclusive: bool) -> Rule | None:
        """The last entry task's rule that picks `branch` (and, inclusive, records `later`)."""
        locals_: JsonObject = {}
        matched: JsonValue = [branch.name]
        if inclusive and later:
            for other in later:
                expr = single_expression(str(other.when))
                if expr is None:
                    self.report(other.line, "in inclusive mode a `when` is one {{ expression }}",
                                f"case[{other.position}].when")
                    return None
                locals_[f"_case_{other.position}"] = template(
                    IfElse(Const(True), Group(Source(expr)), Const(False)))
            matched = template(Concat((ListOf((Const(branch.name),)), *(
                Group(IfElse(ListOf((Const(o.name),)), Name(f"_case_{o.position}"), ListOf()))
                for o in later))))
        when = branch.when if branch.when is not None else OK
        return Rule(when=when, event="call.done", do="jump", to=branch.tasks[0].name,
                    set_locals=locals_, case_matched=matched, line=branch.line)

    def chain_end(self, branch: _Branch, later: list[_Branch], inclusive: bool) -> list[Rule]:
        """The last task of `branch`: on to the next selected branch, or end the pipeline."""
        route, priority = branch.route, branch.next_priority
        if route is not None and branch.policy == "end_step":
            return [Rule(when=OK, do="break", route=route, line=branch.line)]
        rules = []
        if inclusive:
            rules = [Rule(when=template(And((CALL_OK, Name(f"_case_{o.position}")))), do="jump",
                          to=o.tasks[0].name, route=route, priority=priority, line=branch.line)
                     for o in later]
        return [*rules, Rule(when=OK, do="break", route=route, priority=priority,
                             line=branch.line)]


def compile_spec001(raw_step: JsonObject, *, step: str, tasks: tuple[Task, ...],
                    next_spec: NextSpec, report: Report, parse_task: ParseTask) -> Spec001IR:
    """The step's pipeline, arcs and `Step.case` with its spec 001 `case` compiled in."""
    compiler = _Compiler(step, report, parse_task)
    mode = compiler.knob(raw_step, "case_mode", MODES)
    order = compiler.knob(raw_step, "branch_order", ORDERS)
    policy = compiler.knob(raw_step, "next_policy", POLICIES)
    inclusive = mode == "inclusive"
    line = line_of(raw_step, "case")
    branches = compiler.branches(raw_step.get("case") or [], line, policy)
    guarded = [b for b in branches if b.when is not None]
    if order == "priority":
        guarded.sort(key=lambda b: -b.priority)  # stable: YAML order among equals
    ordered = guarded + [b for b in branches if b.when is None]
    names = {t.name for t in tasks}
    fillers: set[str] = set()
    for branch in ordered:
        if not branch.tasks:
            # A branch with only `next` still needs a task to jump to; it keeps the result.
            filler = Task(name=f"{step}_{branch.name}", kind="noop", line=branch.line)
            branch.tasks.append(filler)
            fillers.add(filler.name)
        for task in branch.tasks:
            if task.name in names:
                report(branch.line, f'task name "{task.name}" is used twice in this step',
                       f"case[{branch.position}].then")
            names.add(task.name)
    selectors: list[Rule] = []
    for index, branch in enumerate(ordered):
        later = guarded[index + 1:] if branch.when is not None else []
        if (rule := compiler.selectors(branch, later, inclusive)) is not None:
            selectors.append(rule)
    selectors.append(Rule(when=OK, do="break", case_matched=[]))
    last = tasks[-1]
    compiled = [*tasks[:-1], last.model_copy(update={"rules": (*selectors, *last.rules),
                                                     "has_policy": True})]
    arcs: list[Arc] = []
    for index, branch in enumerate(ordered):
        later = guarded[index + 1:] if branch.when is not None else []
        *body, tail = branch.tasks
        ends = compiler.chain_end(branch, later, inclusive)
        if tail.name in fillers:
            ends = [r.model_copy(update={"result": template(Name("_prev"))}) for r in ends]
        retry, own = (tail.rules[:compiler.retries.get(tail.name, 0)],
                      tail.rules[compiler.retries.get(tail.name, 0):])
        compiled += [*body, tail.model_copy(update={"rules": (*retry, *ends, *own),
                                                    "has_policy": True})]
        if branch.next is not None:
            arcs += target_arcs(branch.next.get("to"), route=branch.route, line=branch.line,
                                fld=f"case[{branch.position}].then.next.to", report=report,
                                delay=branch.delay)
    case = CaseSpec(mode=mode, branch_order=order, next_policy=policy, branches=tuple(
        CaseBranch(name=b.name, route=b.route, policy=b.policy, priority=b.priority, line=b.line)
        for b in ordered))
    return Spec001IR(tuple(compiled), next_spec.model_copy(
        update={"arcs": (*next_spec.arcs, *arcs)}), case)
