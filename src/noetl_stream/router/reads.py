"""Which names a step's templates read, found statically with Jinja's AST. Pure.

Contexts are built from these names only: a router-side template (an admission rule, an arc,
a step's `set:`) gets the finished steps it names, and a command carries the finished steps,
workload keys and ctx keys its worker-side templates name. So neither costs more as an execution
finishes more steps. The sandbox gives a template no way to reach a name it does not spell out
(no `context`, no context-reading filters), so the names found are all it can read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from typing import Any

from jinja2 import TemplateSyntaxError, nodes

from noetl_stream.dsl import pycode, templating
from noetl_stream.dsl.models import Playbook, Rule, Step, Task
from noetl_stream.dsl.views import step_view


def names_read(values: Iterable[Any]) -> set[str]:
    """Top-level names the templates inside `values` read."""
    names: set[str] = set()
    for value in values:
        names |= templating.referenced_names(value)
    return names


def task_results_read(playbook: Playbook) -> frozenset[str]:
    """The pipeline steps whose per-task results some template of the playbook reads as
    `<step>.results` (NoETL's Python engine keeps them there: `{{ page.results.check.more }}`).
    A loop step's `results` are its iterations' (dsl/views.py), so loop steps are not among them.
    """
    pipelines = {s.name for s in playbook.steps if s.tasks and s.loop is None}
    found: set[str] = set()
    for text in templating.template_strings(playbook.model_dump(mode="json")):
        if "results" in text:
            found |= _fields_of(text, "results") & pipelines
    return frozenset(found)


def _fields_of(text: str, field_name: str) -> set[str]:
    """Names whose `field_name` the template reads (`name.field_name` or `name['field_name']`)."""
    try:
        ast = templating.parse_template(text)
    except TemplateSyntaxError:
        return set()
    out = {n.node.name for n in ast.find_all(nodes.Getattr)
           if n.attr == field_name and isinstance(n.node, nodes.Name)}
    out |= {n.node.name for n in ast.find_all(nodes.Getitem)
            if isinstance(n.node, nodes.Name) and isinstance(n.arg, nodes.Const)
            and n.arg.value == field_name}
    return out


def rule_templates(rules: Iterable[Rule]) -> list[Any]:
    """The template fields of rules the router evaluates (case step.enter / step.exit / listen)."""
    return [[rule.when, rule.set_ctx, rule.result] for rule in rules]


def step_reads(step: Step) -> set[str]:
    """Names this step's worker-side templates read, to ship only those step results (its
    loop's worker-side templates included).
    """
    names: set[str] = templating.referenced_names(step.args) | loop_reads(step)
    for task in tasks_and_rule_sinks(step):
        names |= templating.referenced_names(task.config)
        names |= templating.referenced_names(task.input)
        names |= templating.referenced_names([task.set_ctx, task.set_iter, task.set_locals])
        names |= templating.referenced_names(task.sink.when if task.sink else None)
        for rule in task.rules:
            names |= templating.referenced_names([rule.when, rule.set_ctx, rule.set_iter,
                                                  rule.set_locals, rule.call, rule.result])
    return names


def loop_reads(step: Step) -> set[str]:
    """Names the worker-side loop templates read (a cursor's claim, auth and connection)."""
    spec = step.loop
    if spec is None or spec.cursor is None:
        return set()
    cursor = spec.cursor
    return templating.referenced_names([cursor.claim, cursor.auth, cursor.connection])


def reads_context(step: Step) -> bool:
    """Whether a python task of the step reads `context`, which holds every finished step."""
    return any(t.kind == "python" and isinstance(code := t.config.get("code"), str)
               and pycode.reads_context(code) for t in tasks_and_rule_sinks(step))


def tasks_and_rule_sinks(step: Step) -> tuple[Task, ...]:
    """Every task a command of the step may run: its pipeline and the sinks its rules start."""
    return (*step.tasks, *(sink for task in step.tasks for rule in task.rules for sink in rule.sink))


def only(scope: dict[str, Any], names: AbstractSet[str], whole: str) -> dict[str, Any]:
    """The part of `scope` a step reads: all of it when the step names the scope itself (its
    templates may read any key), else just the bare names that resolve into it.
    """
    if whole in names:
        return scope
    return {k: v for k, v in scope.items() if k in names}


def pick_steps(names: Iterable[str], records: Mapping[str, Any],
               execution_id: str | None = None) -> dict[str, Any]:
    """The finished steps' results among `names` (the names a step's templates read); given the
    execution, large ones also answer NoETL's locators (`step_view`).
    """
    out: dict[str, Any] = {}
    # Sorted: a set's order follows PYTHONHASHSEED, and this order reaches the command's bytes.
    for name in sorted(names):
        rec = records.get(name)
        # A replay's seeded steps did not run here (runs 0) but hold the original's results.
        if rec is not None and (rec.status == "completed" or
                                (rec.status == "failed" and rec.runs)):
            out[name] = step_view(rec.result, rec.http, rec.loop, execution_id=execution_id)
    return out
