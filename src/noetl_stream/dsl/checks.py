"""Static checks of a parsed playbook's templates, before anything runs. Pure.

What a template reads that cannot be there is found by walking Jinja's AST:
- `workload.KEY` for a KEY the workload does not define (a payload may still supply it, so a
  warning; `run`, which knows the merged workload, refuses it);
- a bare name that is no step, workload key, ctx, iterator or argument name but is one letter or
  two away from a step's name (`fetch_order` for `fetch_orders`): a typo that renders empty;
- in a loop step, `iter.NAME` where NAME is neither the loop's `iterator:` nor a name the step
  writes into `iter`.
A read guarded by `default`, `is defined`, `or` or an `if` test is never reported: that is how a
template says a value is optional. Each finding is a warning, an error under --strict.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from jinja2 import nodes

from noetl_stream.dsl import templating
from noetl_stream.dsl.models import Playbook, Rule, Step, Task
from noetl_stream.errors import Issue

# Names a template may read that no playbook declares (dsl/context.py, the pipeline's views,
# the case and listener dialects, Jinja's own globals).
CONTEXT_NAMES = frozenset({
    "workload", "ctx", "args", "input", "iter", "vars", "execution_id", "event", "result", "output",
    "outcome", "response", "error", "job", "keychain", "data", "this", "status_code", "http",
    "range", "loop", "dict", "lipsum", "cycler", "joiner", "namespace", "true", "false", "none",
    "True", "False", "None", "self", "varargs", "kwargs", "caller", "secret", "env", "context",
    "step", "steps", "page", "attempt", "retry", "call", "timer", "signal", "parent",
})
ITER_NAMES = frozenset({"_index", "_total", "parent", "index"})
GUARDING_FILTERS = frozenset({"default", "d"})
GUARDING_TESTS = frozenset({"defined", "undefined", "none"})


@dataclass(frozen=True)
class _Template:
    """One template string of a step, where it stands."""

    text: str
    step: str
    field: str
    line: int | None


@dataclass(frozen=True)
class _Finding:
    kind: Literal["workload", "iter", "step"]
    name: str  # the key, iter name or bare name read
    message: str


def template_issues(playbook: Playbook, *, strict: bool) -> list[Issue]:
    """Every finding against the playbook's own workload, in step order."""
    severity = "error" if strict else "warning"
    return [Issue(playbook.file, where.line, finding.message, where.step, where.field, severity)
            for where, finding in _findings(playbook, set(playbook.workload))]


def missing_workload_keys(playbook: Playbook, workload_keys: Collection[str]) -> list[str]:
    """The workload keys templates read unguarded that `workload_keys` (the merged workload's,
    known to `run`) lacks, sorted.
    """
    return sorted({f.name for _, f in _findings(playbook, set(workload_keys))
                   if f.kind == "workload"})


def step_reads(playbook: Playbook) -> Iterator[tuple[str, str, int | None, str]]:
    """(step, field, line, name) for each unguarded read of another step's result by its bare
    name, where the runtime resolves that name to the step: names a ctx, iterator, argument,
    task, local or workload key could also answer are left out (they may hide the step).
    """
    steps = {s.name for s in playbook.steps}
    shadowing = _bound_names(playbook) | set(playbook.workload) | CONTEXT_NAMES
    readable = steps - shadowing
    for step in playbook.steps:
        for where in _step_templates(step):
            reads = _reads_of(where.text)
            if reads is None:  # a syntax error is the parser's to report
                continue
            names = set(reads.loaded)
            for name in sorted(names & readable - reads.guarded - reads.declared - {step.name}):
                yield step.name, where.field, where.line, name


def _findings(playbook: Playbook, keys: set[str]) -> Iterator[tuple[_Template, _Finding]]:
    steps = [s.name for s in playbook.steps]
    bound = _bound_names(playbook) | keys | set(steps)
    for step in playbook.steps:
        loop = (step.loop.iterator, _iter_names(step)) if step.loop is not None else None
        for where in _step_templates(step):
            for finding in _template_findings(where.text, keys, steps, bound, loop):
                yield where, finding


def _template_findings(text: str, keys: set[str], steps: list[str], bound: set[str],
                       loop: tuple[str, set[str]] | None) -> Iterator[_Finding]:
    reads = _reads_of(text)
    if reads is None:  # a syntax error is the parser's to report, with its own message
        return
    for owner, attr in reads.attributes:
        if f"{owner}.{attr}" in reads.guarded:
            continue
        if owner == "workload" and attr not in keys:
            yield _Finding("workload", attr, f"reads workload.{attr}, which the workload does "
                                             f"not define{_did_you_mean(attr, keys)}")
        elif owner == "iter" and loop is not None and attr not in loop[1]:
            yield _Finding("iter", attr, f"reads iter.{attr}, which the loop does not set (its "
                                         f'iterator is "{loop[0]}")')
    for name in reads.loaded:
        if name in reads.guarded or name in bound or name in reads.declared or name in CONTEXT_NAMES:
            continue
        close = difflib.get_close_matches(name, steps, n=1, cutoff=0.8)
        if close:
            yield _Finding("step", name, f'reads "{name}", which is no step, workload key or ctx '
                                         f'name; did you mean "{close[0]}"?')


@dataclass(frozen=True)
class _Reads:
    """What one template text reads, from one walk of its AST. The parser's checks, the net's
    (net_checks.py) and `run`'s check of the merged workload each go over every template of
    the playbook, and steps often hold the same text: each reads this instead of walking the
    template again.
    """

    attributes: tuple[tuple[str, str], ...]  # `owner.attr` read off a bare name, in order
    loaded: tuple[str, ...]  # each bare name read, in order (repeats kept)
    guarded: frozenset[str]  # see `_guarded`
    declared: frozenset[str]  # see `_locally_declared`


@lru_cache(maxsize=4096)
def _reads_of(text: str) -> _Reads | None:
    """The reads of a template text; None when it does not parse."""
    try:
        ast = templating.parse_template(text)
    except Exception:
        return None
    return _Reads(
        attributes=tuple((node.node.name, node.attr) for node in ast.find_all(nodes.Getattr)
                         if isinstance(node.node, nodes.Name)),
        loaded=tuple(n.name for n in ast.find_all(nodes.Name) if n.ctx == "load"),
        guarded=frozenset(_guarded(ast)),
        declared=frozenset(_locally_declared(ast)),
    )


def _did_you_mean(word: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, sorted(known), n=1, cutoff=0.6)
    return f'; did you mean "{close[0]}"?' if close else ""


def _guarded(ast: nodes.Node) -> set[str]:
    """What the template reads under a guard that makes a missing value fine (`x.y` and `x`
    spelt as text): every read of it in the template is then optional.
    """
    roots: list[nodes.Node] = []
    for f in ast.find_all(nodes.Filter):
        if f.name in GUARDING_FILTERS and f.node is not None:
            roots.append(f.node)
    for t in ast.find_all(nodes.Test):
        if t.name in GUARDING_TESTS:
            roots.append(t.node)
    roots.extend(n.left for n in ast.find_all(nodes.Or))
    roots.extend(n.test for n in ast.find_all(nodes.CondExpr))
    roots.extend(n.test for n in ast.find_all(nodes.If))
    out: set[str] = set()
    for root in roots:
        for node in [root, *root.find_all((nodes.Getattr, nodes.Name))]:
            if isinstance(node, nodes.Name):
                out.add(node.name)
            elif isinstance(node, nodes.Getattr) and isinstance(node.node, nodes.Name):
                out.add(f"{node.node.name}.{node.attr}")
    return out


def _locally_declared(ast: nodes.Node) -> set[str]:
    """Names a template binds itself: `{% set %}`, `{% for %}` targets, macro arguments."""
    return {n.name for n in ast.find_all(nodes.Name) if n.ctx in ("store", "param")}


def _bound_names(playbook: Playbook) -> set[str]:
    """Names a playbook binds somewhere: ctx and iter writes, arc and step arguments, vars,
    loop iterators, task names and pipeline locals.
    """
    names: set[str] = set()
    for step in playbook.steps:
        names |= set(step.set_ctx) | set(step.vars) | set(step.args)
        if step.loop is not None:
            names.add(step.loop.iterator)
        for arc in step.next.arcs:
            names |= set(arc.args) | set(arc.set_ctx)
        for rule in _step_rules(step):
            names |= set(rule.set_ctx) | set(rule.set_iter) | set(rule.set_locals)
        for task in step.tasks:
            names.add(task.name)
            names |= set(task.set_ctx) | set(task.set_iter) | set(task.set_locals)
            names |= set(task.input)
            declared = task.config.get("vars")
            if isinstance(declared, dict):
                names |= {str(k) for k in declared}
    return names


def _iter_names(step: Step) -> set[str]:
    """What `iter` holds in a loop step (outside loops `iter` is the parent's: not checked)."""
    names = {step.loop.iterator if step.loop else ""} | ITER_NAMES
    for task in step.tasks:
        names |= set(task.set_iter)
        for rule in task.rules:
            names |= set(rule.set_iter)
    for rule in _step_rules(step):
        names |= set(rule.set_iter)
    return names


def _step_rules(step: Step) -> Iterator[Rule]:
    yield from step.enter
    yield from step.exit
    yield from step.listen
    for task in step.tasks:
        yield from task.rules


TemplatesOf = Callable[[object, str, int | None], Iterator[_Template]]
"""of(value, field, line): the template strings inside a value, placed at field and line."""


def _step_templates(step: Step) -> Iterator[_Template]:
    """The step's template strings with the field and line they stand at (python code aside:
    it reads names as Python, not as templates).
    """
    def of(value: object, fld: str, line: int | None) -> Iterator[_Template]:
        for text in templating.template_strings(value):
            yield _Template(text, step.name, fld, line)

    yield from of(step.args, "args", step.line)
    yield from of(step.set_ctx, "set", step.line)
    if step.loop is not None:
        yield from of(step.loop.collection, "loop.in", step.loop.line or step.line)
    for task in step.tasks:
        yield from _task_templates(task, step, of)
    for arc in step.next.arcs:
        yield from of([arc.when, arc.args, arc.set_ctx], "next", arc.line or step.line)


def _task_templates(task: Task, step: Step, of: TemplatesOf) -> Iterator[_Template]:
    line = task.line or step.line
    where = "tool" if len(step.tasks) == 1 else f"tool.{task.name}"
    for key, value in task.config.items():
        if not (task.kind == "python" and key == "code"):
            yield from of(value, f"{where}.{key}", line)
    yield from of(task.input, f"{where}.input", line)
