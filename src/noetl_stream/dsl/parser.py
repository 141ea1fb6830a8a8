"""Parse a playbook's YAML into the canonical IR, collecting every issue before failing once.

Accepts the canonical v10 form (spec 002/003) and the keys NoETL uses today (ARCHITECTURE §8):
`set: {ctx.x, iter.y}` beside `set_ctx`/`set_iter`, `input` beside `args`, `output` beside
`outcome`, every task-list shape, and structural `next` as a string, a list, or `{spec, arcs}`.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from noetl_stream import ids, refs
from noetl_stream.dsl import layering, pycode, scripts, support, templating, transfer
from noetl_stream.dsl.dialects.case import CaseIR, compile_case
from noetl_stream.dsl.dialects.listeners import compile_listeners, eval_mode_of
from noetl_stream.dsl.dialects.retry import compile_poll, compile_retry, inherit_retry
from noetl_stream.dsl.dialects.sink import append_sinks, step_sinks
from noetl_stream.dsl.dialects.v2_spec001 import compile_spec001, structural_next, uses_spec001
from noetl_stream.dsl.implicit_end import route_leaves_to_end
from noetl_stream.dsl.keychain import parse_keychain
from noetl_stream.dsl.kinds import (
    COMMON_TASK_KEYS,
    KIND_FIELDS,
    NOETL_KINDS_NOT_BUILT,
    RUNNABLE_KINDS,
    field_aliases,
)
from noetl_stream.dsl.loops import parse_loop
from noetl_stream.dsl.models import (
    AdmitRule,
    Arc,
    CaseSpec,
    NextSpec,
    Playbook,
    PollSpec,
    Rule,
    Step,
    Task,
)
from noetl_stream.dsl.source import YamlSyntaxError, line_of, load_yaml, plain, suggest
from noetl_stream.errors import Issue, PlaybookError

API_VERSION = "noetl.io/v2"
TOP_KEYS = frozenset({"apiVersion", "kind", "metadata", "workload", "workflow", "workbook",
                      "keychain", "executor", "spec"})
STEP_KEYS = frozenset({"step", "desc", "description", "tool", "next", "loop", "set", "args",
                       "input", "spec", "vars", "when", "meta", "output", "outcome", "pool",
                       "case", "retry", "poll", "eval_mode", "case_mode", "branch_order",
                       "next_policy", "sink"})
# Keys of the source documents that a later build compiles; rejecting them beats ignoring them.
NOT_YET_STEP_KEYS: frozenset[str] = frozenset()
RULE_THEN_KEYS = frozenset({"do", "attempts", "max_attempts", "backoff", "delay", "max_delay", "to",
                            "set_ctx", "set_iter", "set"})
ARC_KEYS = frozenset({"step", "when", "args", "set", "input", "desc"})
CODE_TEMPLATE_HINT = ("; python code is rendered like every field, so `{{` and `{%` start templates "
                      "(as in NoETL): wrap literal ones in {% raw %}...{% endraw %}")


@dataclass
class ParseResult:
    playbook: Playbook
    warnings: list[Issue] = field(default_factory=list)
    # The files its `script:` fields name, by uri as written: what travels with its text.
    scripts: dict[str, str] = field(default_factory=dict)


class _Parser:
    def __init__(self, file: str, kinds: Collection[str], strict: bool,
                 base_dir: Path | None = None, attached: dict[str, str] | None = None) -> None:
        self.file = file
        self.kinds = kinds
        self.strict = strict
        self.base_dir = base_dir
        self.workload: dict[str, Any] = {}  # a script's uri may read it (scripts.parse_script)
        self.attached = attached or {}
        self.scripts: dict[str, str] = {}
        self.issues: list[Issue] = []

    # -- issue helpers ---------------------------------------------------------------------
    def error(self, line: int | None, message: str, step: str | None = None,
              field: str | None = None) -> None:
        self.issues.append(Issue(self.file, line, message, step, field))

    def unknown_keys(self, node: Any, known: Collection[str], step: str | None,
                     prefix: str) -> None:
        if not isinstance(node, dict):
            return
        for key in node:
            if key not in known:
                severity = "error" if self.strict else "warning"
                self.issues.append(Issue(self.file, line_of(node, key),
                                         f'unknown key "{key}"{suggest(str(key), known)}', step,
                                         f"{prefix}{key}", severity))

    def warning(self, line: int | None, message: str, step: str | None = None,
                field: str | None = None) -> None:
        self.issues.append(Issue(self.file, line, message, step, field, "warning"))

    def not_supported(self, line: int | None, message: str, step: str | None, fld: str) -> None:
        """A field that would have no effect: a warning, or an error under --strict."""
        self.issues.append(Issue(self.file, line, message, step, fld,
                                 "error" if self.strict else "warning"))

    def check_templates(self, value: Any, line: int | None, step: str | None, fld: str,
                        hint: str = "") -> None:
        for text in templating.template_strings(value):
            problem = templating.syntax_problem(text)
            if problem:
                shown = text if len(text) <= 120 else text[:117] + "..."
                self.error(line, f"template {shown!r} does not parse: {problem}{hint}", step, fld)

    # -- top level -------------------------------------------------------------------------
    def parse(self, doc: Any) -> Playbook | None:
        if not isinstance(doc, dict):
            self.error(1, "a playbook is a YAML mapping with apiVersion, kind, metadata, workflow")
            return None
        self.unknown_keys(doc, TOP_KEYS, None, "")
        api = doc.get("apiVersion")
        if api != API_VERSION:
            shown = "missing" if api is None else f'"{api}"'
            self.error(line_of(doc, "apiVersion") or 1,
                       f'apiVersion is {shown}; this runtime reads "{API_VERSION}"', None, "apiVersion")
        kind = doc.get("kind", "Playbook")
        if kind != "Playbook":
            self.error(line_of(doc, "kind"), f'kind is "{kind}"; expected "Playbook"', None, "kind")
        meta = doc.get("metadata") or {}
        if not isinstance(meta, dict) or not meta.get("name"):
            self.error(line_of(doc, "metadata") or 1, "metadata.name is required", None,
                       "metadata.name")
            meta = meta if isinstance(meta, dict) else {}
        workload = doc.get("workload") or {}
        if not isinstance(workload, dict):
            self.error(line_of(doc, "workload"), "workload must be a mapping", None, "workload")
            workload = {}
        self.workload = plain(workload)
        keychain = parse_keychain(doc.get("keychain"), doc, self)
        executor = doc.get("executor") or {}
        limit_problem = refs.limit_problem(executor) if isinstance(executor, dict) else None
        if limit_problem:
            self.error(line_of(doc, "executor"), limit_problem, None,
                       "executor.spec.policy.limits.max_payload_bytes")
        workbook = self.parse_workbook(doc.get("workbook"), doc)
        raw_steps = doc.get("workflow")
        if not isinstance(raw_steps, list) or not raw_steps:
            self.error(line_of(doc, "workflow") or 1, "workflow must be a non-empty list of steps",
                       None, "workflow")
            return None
        steps: list[Step] = []
        seen: set[str] = set()
        for index, raw in enumerate(raw_steps):
            step = self.parse_step(raw, line_of(raw_steps, index), workbook)
            if step is None:
                continue
            if step.name in seen:
                self.error(step.line, "step name is used twice", step.name, "step")
            seen.add(step.name)
            steps.append(step)
        steps = route_leaves_to_end(steps, [str(raw.get("step")) for raw in raw_steps
                                            if isinstance(raw, dict) and "next" not in raw])
        self.check_graph(steps)
        if any(i.severity == "error" for i in self.issues):
            return None
        try:
            playbook = Playbook(
                api_version=str(api), kind=str(kind), name=str(meta.get("name")),
                path=_opt_str(meta.get("path")), version=_opt_str(meta.get("version")),
                description=_opt_str(meta.get("description")), workload=plain(workload),
                steps=tuple(steps), executor=plain(executor) if isinstance(executor, dict) else {},
                keychain=keychain, file=self.file,
            )
        except ValidationError as exc:
            self.error(1, f"playbook does not fit the model: {exc}")
            return None
        playbook = layering.apply(playbook)
        for step_name, line, fld, message in layering.problems(playbook):
            self.error(line if step_name else line_of(doc, "executor"), message, step_name, fld)
        return None if any(i.severity == "error" for i in self.issues) else playbook

    def parse_workbook(self, raw: Any, doc: Any) -> dict[str, tuple[Any, int | None]]:
        book: dict[str, tuple[Any, int | None]] = {}
        if raw is None:
            return book
        if not isinstance(raw, list):
            self.error(line_of(doc, "workbook"), "workbook must be a list of named tasks", None,
                       "workbook")
            return book
        for index, entry in enumerate(raw):
            line = line_of(raw, index)
            if not isinstance(entry, dict) or not entry.get("name"):
                self.error(line, "each workbook entry needs a name", None, f"workbook[{index}]")
                continue
            book[str(entry["name"])] = (entry, line)
        return book

    # -- steps -----------------------------------------------------------------------------
    def parse_step(self, raw: Any, line: int | None,
                   workbook: dict[str, tuple[Any, int | None]]) -> Step | None:
        try:
            return self.parse_step_fields(raw, line, workbook)
        except Exception as exc:
            # A shape no check above foresaw is still an error of this step, never a traceback.
            name = str(raw.get("step")) if isinstance(raw, dict) else None
            self.error(line_of(raw) or line, f"this step cannot be read ({type(exc).__name__}: "
                       f"{_one_line(str(exc))})", name)
            return None

    def parse_step_fields(self, raw: Any, line: int | None,
                          workbook: dict[str, tuple[Any, int | None]]) -> Step | None:
        if not isinstance(raw, dict) or "step" not in raw:
            self.error(line, "each workflow entry needs a `step:` name", None, "step")
            return None
        name = str(raw["step"])
        line = line_of(raw) or line
        if not name or len(name) > ids.MAX_STEP_NAME_LENGTH or any(
                ord(c) < 32 or 127 <= ord(c) < 160 for c in name):
            # Commands and events carry it (messages.py `StepName`): refused here, not there.
            self.error(line, f"a step name has 1 to {ids.MAX_STEP_NAME_LENGTH} characters and no "
                       "control characters", name[:60], "step")
        for key in raw:
            if key in NOT_YET_STEP_KEYS:
                self.error(line_of(raw, key), f'"{key}" is part of the DSL but not supported by '
                           "this version of noetl-stream yet", name, str(key))
        self.unknown_keys(raw, STEP_KEYS | NOT_YET_STEP_KEYS, name, "")
        for key, what in support.UNSUPPORTED_STEP.items():
            if key in raw:
                self.not_supported(line_of(raw, key), f"{what} is not supported by this version "
                                   "of noetl-stream; the field has no effect", name, key)
        args = self.mapping(raw, "input", name, "input")
        args.update(self.mapping(raw, "args", name, "args"))
        spec = raw.get("spec") or {}
        admit = self.parse_admit(spec, raw, name)
        loop = parse_loop(raw["loop"], name, self, self.kinds) if raw.get("loop") is not None \
            else None
        tasks = self.parse_tools(raw.get("tool"), raw, name, workbook)
        tasks = self.parse_step_retry(raw, name, tasks)
        set_ctx, set_vars = self.parse_step_set(raw, name)
        vars_block = self.mapping(raw, "vars", name, "vars")
        vars_block.update(set_vars)
        nxt = self.parse_next(raw.get("next"), raw, name)
        enter: tuple[Rule, ...] = ()
        exit_rules: tuple[Rule, ...] = ()
        eval_mode = eval_mode_of(raw, spec, lambda ln, message, fld: self.error(ln, message, name, fld))
        listen: tuple[Rule, ...] = ()
        case_spec: CaseSpec | None = None
        if eval_mode == "on_event":
            tasks, (listen, nxt) = [], self.parse_listeners(raw, name, nxt)
        elif raw.get("case") is not None and uses_spec001(raw):
            tasks, nxt, case_spec = self.parse_spec001(raw, name, tasks, nxt, workbook)
        elif raw.get("case") is not None:
            case = self.parse_case(raw, name, tasks, nxt, workbook)
            tasks, nxt, enter, exit_rules = list(case.tasks), case.next, case.enter, case.exit
            admit = (*case.admit, *admit)
        if raw.get("sink") is not None:
            tasks = self.parse_step_sinks(raw, name, tasks, workbook, eval_mode)
        for fld in ("input", "args", "set", "vars"):
            self.check_templates(raw.get(fld), line_of(raw, fld), name, fld)
        pool = raw.get("pool")
        if pool is not None and not (isinstance(pool, str) and ids.is_subject_token(pool)):
            # The pool is a token of the command subject `<prefix>.commands.<pool>.<kind>`.
            self.error(line_of(raw, "pool") or line, f"pool {pool!r} is not a pool name: letters, "
                       "digits, `-` and `_`, at most 128 characters", name, "pool")
            pool = None
        try:
            return Step(name=name, desc=_opt_str(raw.get("desc") or raw.get("description")),
                        line=line, args=args, admit=admit, loop=loop, tasks=tuple(tasks),
                        set_ctx=set_ctx, vars=vars_block, next=nxt, enter=enter, exit=exit_rules,
                        eval_mode=eval_mode, listen=listen, case=case_spec,
                        spec=plain(spec) if isinstance(spec, dict) else {},
                        pool=str(pool) if pool else None)
        except ValidationError as exc:
            self.error(line, f"step does not fit the model: {exc.errors()[0]['msg']}", name)
            return None

    def parse_listeners(self, raw: dict[str, Any], step: str,
                        nxt: NextSpec) -> tuple[tuple[Rule, ...], NextSpec]:
        """An `eval_mode: on_event` step's `case:` as listen rules (dsl/dialects/listeners.py)."""
        line = line_of(raw, "case")
        ir = compile_listeners(raw.get("case"), step=step, line=line or line_of(raw), next_spec=nxt,
                               report=lambda ln, message, fld: self.error(ln, message, step, fld))
        for rule in ir.listen:
            self.check_templates([rule.when, rule.set_ctx, rule.result], rule.line or line, step,
                                 "case")
        self.check_templates([a.args for a in ir.next.arcs if a.route], line, step, "case.next")
        return ir.listen, ir.next

    def parse_spec001(self, raw: dict[str, Any], step: str, tasks: list[Task], nxt: NextSpec,
                      workbook: dict[str, tuple[Any, int | None]]
                      ) -> tuple[list[Task], NextSpec, CaseSpec]:
        """The spec 001 step form compiled into the canonical IR (dsl/dialects/v2_spec001.py)."""
        ir = compile_spec001(
            raw, step=step, tasks=tuple(tasks), next_spec=nxt,
            report=lambda ln, message, fld: self.error(ln, message, step, fld),
            parse_task=lambda task, body, ln: self.parse_task(task, body, ln, step, workbook))
        line = line_of(raw, "case")
        for task in ir.tasks:
            for rule in task.rules:
                self.check_templates([rule.when, rule.set_locals, rule.case_matched, rule.result],
                                     rule.line or line, step, "case")
        self.check_templates([[a.when, a.args] for a in ir.next.arcs], line, step, "case.next")
        return list(ir.tasks), ir.next, ir.case

    def parse_step_sinks(self, raw: dict[str, Any], step: str, tasks: list[Task],
                         workbook: dict[str, tuple[Any, int | None]], eval_mode: str) -> list[Task]:
        """Step-level `sink:` as storage tasks after the pipeline (dsl/dialects/sink.py)."""
        line = line_of(raw, "sink")
        if eval_mode == "on_event":
            self.error(line, "a listener runs no tool, so it has nothing to sink", step, "sink")
            return tasks
        sinks = step_sinks(raw["sink"], step=step, line=line,
                           report=lambda ln, message, fld: self.error(ln, message, step, fld),
                           parse_task=lambda task, body, ln: self.parse_task(task, body, ln, step,
                                                                             workbook))
        for sink in sinks:
            self.check_templates(sink.sink.when if sink.sink else None, line, step, "sink.when")
        return append_sinks(tasks, sinks,
                            report=lambda ln, message, fld: self.error(ln, message, step, fld))

    def parse_case(self, raw: dict[str, Any], step: str, tasks: list[Task], nxt: NextSpec,
                   workbook: dict[str, tuple[Any, int | None]]) -> CaseIR:
        """Step-level `case:` compiled into the canonical IR (dsl/dialects/case.py)."""
        line = line_of(raw, "case")
        case = compile_case(raw["case"], step=step, line=line, tasks=tuple(tasks), next_spec=nxt,
                            report=lambda ln, message, fld: self.error(ln, message, step, fld),
                            parse_task=lambda task, body, ln: self.parse_task(task, body, ln, step,
                                                                              workbook))
        rules = [*case.enter, *case.exit, *(r for t in case.tasks for r in t.rules)]
        for rule in rules:
            self.check_templates([rule.when, rule.set_ctx, rule.set_iter, rule.call, rule.result],
                                 rule.line or line, step, "case")
        self.check_templates([a.args for a in case.next.arcs if a.route], line, step, "case.next")
        return case

    def mapping(self, node: dict[str, Any], key: str, step: str | None, fld: str) -> dict[str, Any]:
        value = node.get(key)
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.error(line_of(node, key), "must be a mapping", step, fld)
            return {}
        return plain(value)  # type: ignore[no-any-return]

    def parse_admit(self, spec: Any, raw: dict[str, Any], step: str) -> tuple[AdmitRule, ...]:
        rules: list[AdmitRule] = []
        if raw.get("when") is not None:
            # Older playbooks guard a step with `when:`; it means exactly an admission rule.
            rules += [AdmitRule(when=str(raw["when"]), allow=True), AdmitRule(when=None, allow=False)]
            self.check_templates(raw["when"], line_of(raw, "when"), step, "when")
        if not isinstance(spec, dict):
            return tuple(rules)
        admit = (spec.get("policy") or {}).get("admit") if isinstance(spec.get("policy"), dict) else None
        if admit is None:
            return tuple(rules)
        raw_rules = admit.get("rules") if isinstance(admit, dict) else None
        if not isinstance(raw_rules, list):
            self.error(line_of(spec, "policy"), "admit needs a `rules:` list", step,
                       "spec.policy.admit.rules")
            return tuple(rules)
        for index, entry in enumerate(raw_rules):
            when, then, _ = self.split_rule(entry, raw_rules, index, step, "spec.policy.admit")
            if then is None:
                continue
            allow = then.get("allow", True) if isinstance(then, dict) else True
            rules.append(AdmitRule(when=when, allow=bool(allow)))
        return tuple(rules)

    def split_rule(self, entry: Any, seq: Any, index: int, step: str | None,
                   fld: str) -> tuple[str | None, dict[str, Any] | None, int | None]:
        """Return (when, then, line) for `{when, then}`, `{else: {then}}` or `{else: {...}}`."""
        line = line_of(seq, index)
        if not isinstance(entry, dict):
            self.error(line, "a rule is a mapping with `when` and `then`", step, f"{fld}.rules")
            return None, None, line
        if "else" in entry:
            body = entry["else"]
            then = body.get("then", body) if isinstance(body, dict) else None
            if not isinstance(then, dict):
                self.error(line, "`else` needs a `then` mapping", step, f"{fld}.rules[{index}]")
                return None, None, line
            return None, then, line
        then = entry.get("then")
        if not isinstance(then, dict):
            self.error(line, "a rule needs a `then:` mapping", step, f"{fld}.rules[{index}]")
            return None, None, line
        when = entry.get("when")
        if when is not None:
            self.check_templates(str(when), line, step, f"{fld}.rules[{index}].when")
        return (None if when is None else str(when)), then, line

    def parse_step_set(self, raw: dict[str, Any], step: str) -> tuple[dict[str, Any], dict[str, Any]]:
        ctx: dict[str, Any] = {}
        vars_: dict[str, Any] = {}
        for key, value in self.mapping(raw, "set", step, "set").items():
            scope, _, name = key.partition(".")
            if scope == "vars" and name:
                vars_[name] = value
            elif scope == "ctx" and name:
                ctx[name] = value
            elif scope == "ctx" and isinstance(value, dict):
                ctx.update(value)
            else:
                ctx[key] = value
        return ctx, vars_

    # -- tools -----------------------------------------------------------------------------
    def parse_tools(self, raw: Any, step_node: dict[str, Any], step: str,
                    workbook: dict[str, tuple[Any, int | None]]) -> list[Task]:
        if raw is None:
            return [Task(name=f"{step}_task", kind="noop", line=line_of(step_node))]
        entries: list[tuple[str, Any, int | None]] = []
        if isinstance(raw, dict) and "kind" in raw:
            entries.append((f"{step}_task", raw, line_of(step_node, "tool")))
        elif isinstance(raw, list):
            for index, item in enumerate(raw):
                line = line_of(raw, index)
                if isinstance(item, dict) and "kind" in item:
                    entries.append((str(item.get("name") or f"task_{index}"), item, line))
                elif (isinstance(item, dict) and len(item) == 1
                      and isinstance(next(iter(item.values())), dict)):
                    label, body = next(iter(item.items()))
                    entries.append((str(label), body, line))
                else:
                    self.error(line, "a task is `{name, kind, ...}` or `{label: {kind, ...}}`", step,
                               f"tool[{index}]")
        else:
            self.error(line_of(step_node, "tool"), "tool must be a task or a list of tasks", step, "tool")
        tasks: list[Task] = []
        names: set[str] = set()
        for name, body, line in entries:
            task = self.parse_task(name, body, line, step, workbook)
            if task is None:
                continue
            if task.name in names:
                self.error(line, f'task name "{task.name}" is used twice', step, "tool.name")
            names.add(task.name)
            tasks.append(task)
        for task in tasks:
            for rule in task.rules:
                if rule.do == "jump" and rule.to not in names:
                    self.error(rule.line, f'jump target "{rule.to}" is not a task of this step'
                               f"{suggest(str(rule.to), names)}", step, f"tool.{task.name}.spec.policy")
        return tasks

    def parse_task(self, name: str, body: Any, line: int | None, step: str,
                   workbook: dict[str, tuple[Any, int | None]], depth: int = 0) -> Task | None:
        if not isinstance(body, dict):
            self.error(line, "a task must be a mapping", step, "tool")
            return None
        kind = str(body.get("kind"))
        if kind == "workbook":
            return self.inline_workbook(name, body, line, step, workbook, depth)
        if kind not in self.kinds:
            known = sorted(set(self.kinds) | set(KIND_FIELDS))
            if kind in KIND_FIELDS or kind in NOETL_KINDS_NOT_BUILT:
                self.error(line_of(body, "kind") or line, f'tool kind "{kind}" is not available in '
                           "this version of noetl-stream yet", step, "tool.kind")
            else:
                self.error(line_of(body, "kind") or line,
                           f'unknown tool kind "{kind}"{suggest(kind, known)}', step, "tool.kind")
            return None
        fields = KIND_FIELDS.get(kind, frozenset())
        self.unknown_keys(body, COMMON_TASK_KEYS | fields | frozenset(field_aliases(kind)), step,
                          "tool.")
        # `name` is the task's name, except where the kind reads it as a field (secrets).
        config = self.resolve_aliases(kind, body, line, step, {
            k: plain(v) for k, v in body.items()
            if k not in COMMON_TASK_KEYS or (k == "name" and k in fields)})
        # Older spellings count under the field's name: `credential` beside `connection` is
        # shadowed like `auth` is.
        spelled = {k: v for k, v in body.items() if k not in field_aliases(kind)} | config
        for key, why in support.ignored_fields(kind, spelled):
            self.not_supported(line_of(body, key) or line, why, step, f"tool.{key}")
        if "script" in config and kind in scripts.SCRIPT_FIELD:
            config = self.load_script(kind, config, body, line, step)
        else:
            config = scripts.decode_b64(kind, config, lambda fld, message: self.error(
                line_of(body, fld) or line, message, step, f"tool.{fld}"))
        if kind == "python" and body.get("libs") is not None:
            config["libs"], packages = pycode.normalize_libs(config.get("libs"))
            for package in packages:
                self.not_supported(line_of(body, "libs") or line, f'libs entry "{package}" is '
                                   "not a module name (a package to install?); nothing is "
                                   "imported for it: install packages on the workers", step,
                                   "tool.libs")
            pycode.check_libs(config["libs"], lambda fld, message: self.error(
                line_of(body, "libs") or line, message, step, f"tool.{fld}"))
        inputs = self.mapping(body, "input", step, "tool.input")
        inputs.update(self.mapping(body, "args", step, "tool.args"))
        spec = body.get("spec") or {}
        policy = spec.get("policy") if isinstance(spec, dict) else None
        rules: list[Rule] = []
        has_policy = isinstance(policy, dict) and "rules" in policy
        if has_policy:
            assert isinstance(policy, dict)
            raw_rules = policy["rules"]
            if not isinstance(raw_rules, list):
                self.error(line_of(policy, "rules"), "rules must be a list", step, "tool.spec.policy.rules")
                raw_rules = []
            for index, entry in enumerate(raw_rules):
                rule = self.parse_rule(entry, raw_rules, index, step)
                if rule is not None:
                    rules.append(rule)
        set_ctx, set_iter, set_locals = split_set(self.mapping(body, "set", step,
                                                               f"tool.{name}.set"))
        set_ctx.update(self.mapping(body, "set_ctx", step, f"tool.{name}.set_ctx"))
        set_iter.update(self.mapping(body, "set_iter", step, f"tool.{name}.set_iter"))
        if kind == "python" and not isinstance(config.get("code"), str) and "script" not in body \
                and "code_b64" not in body:
            self.error(line, "python task needs `code:` (or `script:`)", step, "tool.code")
        if kind == "http" and not (body.get("url") or body.get("endpoint")):
            self.error(line, "http task needs `url:`", step, "tool.url")
        if kind == "transfer":
            self.check_transfer(body, line, step)
        if kind == "playbook" and not body.get("path"):
            self.error(line, "playbook task needs `path:` (a catalog path or ./file.yaml)", step,
                       "tool.path")
        for key, value in config.items():
            if verbatim(config, key):
                continue
            from_script = "script" in config and key == scripts.SCRIPT_FIELD.get(kind)
            fld = "tool.script" if from_script else f"tool.{key}"
            hint = CODE_TEMPLATE_HINT if kind == "python" and key == "code" else ""
            self.check_templates(value, line_of(body, "script" if from_script else key) or line,
                                 step, fld, hint)
        self.check_templates(inputs, line, step, "tool.input")
        spec_plain = {k: v for k, v in plain(spec).items() if k != "policy"} if isinstance(spec, dict) else {}
        clause, poll = self.parse_retry_poll(body, step, "tool.", line)
        return Task(name=name, kind=kind, config=config, input=inputs, rules=(*clause, *rules),
                    has_policy=has_policy, set_ctx=set_ctx, set_iter=set_iter, set_locals=set_locals,
                    spec=spec_plain, poll=poll, line=line)

    def check_transfer(self, body: dict[str, Any], line: int | None, step: str) -> None:
        """A transfer's source and target types and required fields, where no template decides them."""
        for problem in transfer.problems(plain(body), rendered=False):
            node: Any = body
            at = line
            for key in problem.path:
                at = line_of(node, key) or at
                node = node.get(key) if isinstance(node, dict) else None
            self.error(at, problem.message, step, "tool." + ".".join(problem.path))

    def load_script(self, kind: str, config: dict[str, Any], body: dict[str, Any],
                    line: int | None, step: str) -> dict[str, Any]:
        """Put the text of a `script:` file where the kind reads its code or SQL.

        The descriptor stays as `script: {uri}`, which the python tool names in tracebacks and
        the pipeline reads as "this code is a file's text": NoETL renders SQL scripts as
        templates but runs python scripts as written.
        """
        at = line_of(body, "script") or line

        def report(fld: str, message: str) -> None:
            self.error(at, message, step, f"tool.{fld}")

        ref = scripts.parse_script(config["script"], report, self.workload)
        config = {k: v for k, v in config.items() if k not in scripts.REPLACED_FIELDS[kind]}
        config["script"] = {"uri": ref.uri} if ref is not None else {}
        if ref is None:
            return config
        try:
            text = scripts.read_script(ref, self.base_dir, self.attached)
        except ValueError as exc:
            report("script.uri", str(exc))
            return config
        if ref.content is None:  # a file's text travels with the playbook; inline text is in it
            self.scripts[ref.uri] = text
        config[scripts.SCRIPT_FIELD[kind]] = text
        return config

    def resolve_aliases(self, kind: str, body: dict[str, Any], line: int | None, step: str,
                        config: dict[str, Any]) -> dict[str, Any]:
        """Older spellings (`credential:` for `auth:`) under the field's name; both spellings with
        different values is an error, since either could be the one the author meant.
        """
        for old, new in field_aliases(kind).items():
            if old not in config:
                continue
            value = config.pop(old)
            if new in config and config[new] != value:
                self.error(line_of(body, old) or line, f'"{old}" is the older spelling of "{new}" '
                           f"and both are given with different values; keep one of them", step,
                           f"tool.{old}")
                continue
            config[new] = value
        return config

    def parse_retry_poll(self, node: dict[str, Any], step: str, prefix: str,
                         line: int | None) -> tuple[tuple[Rule, ...], PollSpec | None]:
        """A node's `retry:` clause as policy rules and its `poll:` (dsl/dialects/retry.py)."""
        def report(ln: int | None, message: str, fld: str) -> None:
            self.error(ln, message, step, prefix + fld)

        rules: tuple[Rule, ...] = ()
        poll = None
        if node.get("retry") is not None:
            rules = compile_retry(plain(node["retry"]), line=line_of(node, "retry") or line,
                                  field="retry", report=report)
            for rule in rules:
                self.check_templates(rule.when, rule.line, step, f"{prefix}retry")
        if node.get("poll") is not None:
            poll = compile_poll(plain(node["poll"]), line=line_of(node, "poll") or line,
                                field="poll", report=report)
            if poll is not None:
                self.check_templates(poll.until, poll.line, step, f"{prefix}poll.until")
        return rules, poll

    def parse_step_retry(self, raw: dict[str, Any], step: str, tasks: list[Task]) -> list[Task]:
        """Step-level `retry:` is inherited by tasks without their own; `poll:` needs one task."""
        rules, poll = self.parse_retry_poll(raw, step, "", line_of(raw))
        tasks = inherit_retry(tasks, rules)
        if poll is not None:
            if len(tasks) != 1:
                self.error(poll.line, "a step-level `poll:` needs a step with one task; put "
                           "`poll:` on the task to poll", step, "poll")
            elif tasks[0].poll is None:
                tasks = [tasks[0].model_copy(update={"poll": poll})]
        return tasks

    def inline_workbook(self, name: str, body: dict[str, Any], line: int | None, step: str,
                        workbook: dict[str, tuple[Any, int | None]], depth: int) -> Task | None:
        """`kind: workbook, name: X` becomes the workbook task X, with the caller's inputs on top."""
        target = body.get("name")
        if target not in workbook:
            self.error(line_of(body, "name") or line, f'workbook task "{target}" is not defined'
                       f"{suggest(str(target), workbook)}", step, "tool.name")
            return None
        if depth > 8:
            self.error(line, "workbook tasks refer to each other in a cycle", step, "tool.name")
            return None
        entry, entry_line = workbook[str(target)]
        tool = entry.get("tool", entry)
        inner = self.parse_task(name, tool, entry_line, step, workbook, depth + 1)
        if inner is None:
            return None
        caller_inputs = self.mapping(body, "input", step, "tool.input")
        caller_inputs.update(self.mapping(body, "args", step, "tool.args"))
        # Inputs the workbook declares as null are parameters: they must not hide the step's args.
        base = {k: v for k, v in inner.input.items() if v is not None}
        return inner.model_copy(update={"input": {**base, **caller_inputs}})

    def parse_rule(self, entry: Any, seq: Any, index: int, step: str) -> Rule | None:
        when, then, line = self.split_rule(entry, seq, index, step, "tool.spec.policy")
        if then is None:
            return None
        self.unknown_keys(then, RULE_THEN_KEYS, step, "tool.spec.policy.then.")
        fld = f"tool.spec.policy.rules[{index}].then"
        set_ctx, set_iter, set_locals = split_set(self.mapping(then, "set", step, f"{fld}.set"))
        set_ctx.update(self.mapping(then, "set_ctx", step, f"{fld}.set_ctx"))
        set_iter.update(self.mapping(then, "set_iter", step, f"{fld}.set_iter"))
        attempts = then.get("attempts", then.get("max_attempts", 3))
        try:
            return Rule(when=when, do=then.get("do", "continue"), attempts=int(attempts),
                        backoff=then.get("backoff", "fixed"), delay=float(then.get("delay", 0) or 0),
                        max_delay=then.get("max_delay"), to=_opt_str(then.get("to")),
                        set_ctx=set_ctx, set_iter=set_iter, set_locals=set_locals, line=line)
        except (ValidationError, ValueError, TypeError) as exc:
            detail = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
            self.error(line, f"rule is invalid: {detail}", step, f"tool.spec.policy.rules[{index}]")
            return None

    # -- routing ---------------------------------------------------------------------------
    def parse_next(self, raw: Any, step_node: dict[str, Any], step: str) -> NextSpec:
        line = line_of(step_node, "next")
        if raw is None:
            return NextSpec()
        if isinstance(raw, str):
            return NextSpec(mode="exclusive", arcs=(Arc(step=raw, line=line),))
        if isinstance(raw, list):
            arcs = [a for i, item in enumerate(raw) if (a := self.parse_arc(item, raw, i, step))]
            return NextSpec(mode="inclusive", arcs=tuple(arcs))
        if isinstance(raw, dict):
            if "to" in raw:  # spec 001: every target fires
                return structural_next(raw, line=line, report=lambda ln, message, fld: self.error(
                    ln, message, step, fld))
            self.unknown_keys(raw, {"spec", "arcs"}, step, "next.")
            spec = raw.get("spec") or {}
            mode = spec.get("mode", "exclusive") if isinstance(spec, dict) else "exclusive"
            if mode not in ("exclusive", "inclusive"):
                self.error(line, f'next mode "{mode}" is not exclusive or inclusive', step,
                           "next.spec.mode")
                mode = "exclusive"
            raw_arcs = raw.get("arcs") or []
            if not isinstance(raw_arcs, list):
                self.error(line, "next.arcs must be a list", step, "next.arcs")
                return NextSpec(mode=mode)
            arcs = [a for i, item in enumerate(raw_arcs) if (a := self.parse_arc(item, raw_arcs, i, step))]
            return NextSpec(mode=mode, arcs=tuple(arcs))
        self.error(line, "next must be a step name, a list, or {spec, arcs}", step, "next")
        return NextSpec()

    def parse_arc(self, item: Any, seq: Any, index: int, step: str) -> Arc | None:
        line = line_of(seq, index)
        if isinstance(item, str):
            return Arc(step=item, line=line)
        if not isinstance(item, dict) or "step" not in item:
            self.error(line, "an arc needs `step:`", step, f"next.arcs[{index}]")
            return None
        self.unknown_keys(item, ARC_KEYS, step, "next.arcs.")
        fld = f"next.arcs[{index}]"
        args = self.mapping(item, "args", step, f"{fld}.args")
        args.update(self.mapping(item, "input", step, f"{fld}.input"))
        set_ctx, _, set_locals = split_set(self.mapping(item, "set", step, f"{fld}.set"))
        set_ctx.update(set_locals)  # an arc writes only ctx; unscoped keys are ctx keys
        when = item.get("when")
        self.check_templates([when, args, set_ctx], line, step, f"next.arcs[{index}]")
        return Arc(step=str(item["step"]), when=None if when is None else str(when), args=args,
                   set_ctx=set_ctx, line=line)

    def check_graph(self, steps: list[Step]) -> None:
        names = {s.name for s in steps}
        for s in steps:
            for arc in s.next.arcs:
                if arc.step not in names and arc.step != "end":
                    self.error(arc.line or s.line, f'arc goes to step "{arc.step}", which does not '
                               f"exist{suggest(arc.step, names)}", s.name, "next")


def verbatim(config: dict[str, Any], key: str) -> bool:
    """Whether a config field is taken as written, not rendered as a template: the `script`
    descriptor, and python code read from a script file (NoETL runs such files as they are).
    """
    return key == "script" or (key == "code" and "script" in config)


def split_set(values: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """Split NoETL's `set: {ctx.x, iter.y, z}` into (ctx, iter, locals)."""
    ctx: dict[str, Any] = {}
    it: dict[str, Any] = {}
    local: dict[str, Any] = {}
    for key, value in values.items():
        scope, _, name = key.partition(".")
        if scope == "ctx" and name:
            ctx[name] = value
        elif scope == "iter" and name:
            it[name] = value
        elif scope == "ctx" and isinstance(value, dict):
            ctx.update(value)
        elif scope == "iter" and isinstance(value, dict):
            it.update(value)
        else:
            local[key] = value
    return ctx, it, local


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


def parse_playbook(text: str, file: str = "<string>", *, kinds: Collection[str] = RUNNABLE_KINDS,
                   strict: bool = False, base_dir: Path | None = None) -> ParseResult:
    """Parse and validate; raise PlaybookError with every issue, or return the IR and warnings.

    `base_dir` is the folder of the playbook's file, when it was read from disk: `script:` files
    are read relative to it. Without it, they must travel with the text (dsl/scripts.py).
    """
    try:
        own_text, attached = scripts.split_files(text)
    except ValueError as exc:
        raise PlaybookError([Issue(file, None, str(exc))]) from None
    parser = _Parser(file, kinds, strict, base_dir, attached)
    try:
        doc = load_yaml(own_text)
    except YamlSyntaxError as exc:
        raise PlaybookError([Issue(file, exc.line, str(exc))]) from None
    try:
        playbook = parser.parse(doc)
    except Exception as exc:
        # Outside any step (metadata, keychain, workbook, ...): still one error, never a traceback.
        parser.error(1, f"the playbook cannot be read ({type(exc).__name__}: "
                        f"{_one_line(str(exc))})")
        playbook = None
    errors = [i for i in parser.issues if i.severity == "error"]
    if playbook is None or errors:
        raise PlaybookError(parser.issues)
    return ParseResult(playbook, [i for i in parser.issues if i.severity == "warning"],
                       parser.scripts)


def load_playbook(path: str | Path, *, kinds: Collection[str] = RUNNABLE_KINDS,
                  strict: bool = False) -> ParseResult:
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise PlaybookError([Issue(str(p), None, f"cannot read the file: {exc.strerror}")]) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise PlaybookError([Issue(str(p), line, f"the file is not UTF-8 text (byte "
                                                 f"0x{data[exc.start]:02x} cannot be read)")]) from None
    return parse_playbook(text, str(p), kinds=kinds, strict=strict, base_dir=p.parent)


def _one_line(text: str) -> str:
    return " ".join(text.split())[:300]
