"""One workflow entry as a `Step`: its keys, input, admission, loop, tasks, `set:`, `next:`,
and the step forms compiled by the dialects (case, spec 001, listeners, sinks).
"""

from __future__ import annotations

from pydantic import ValidationError

from noetl_stream import ids
from noetl_stream.dsl import support
from noetl_stream.dsl.dialects.case import CaseIR, compile_case
from noetl_stream.dsl.dialects.listeners import compile_listeners, eval_mode_of
from noetl_stream.dsl.dialects.sink import append_sinks, step_sinks
from noetl_stream.dsl.dialects.v2_spec001 import compile_spec001, uses_spec001
from noetl_stream.dsl.loops import parse_loop
from noetl_stream.dsl.models import AdmitRule, CaseSpec, NextSpec, Rule, Step, Task
from noetl_stream.dsl.parsing.arcs import ArcParser
from noetl_stream.dsl.parsing.base import Workbook, one_line, opt_str
from noetl_stream.dsl.parsing.tasks import TaskParser
from noetl_stream.dsl.source import line_of, plain
from noetl_stream.jsonutil import JsonObject, JsonValue

STEP_KEYS = frozenset({"step", "desc", "description", "tool", "next", "loop", "set", "args",
                       "input", "spec", "vars", "when", "meta", "output", "outcome", "pool",
                       "case", "retry", "poll", "eval_mode", "case_mode", "branch_order",
                       "next_policy", "sink"})


class StepParser(TaskParser, ArcParser):
    def parse_step(self, raw: JsonValue, line: int | None,
                   workbook: Workbook) -> Step | None:
        try:
            return self.parse_step_fields(raw, line, workbook)
        except Exception as exc:
            # A shape no check above foresaw is still an error of this step, never a traceback.
            name = str(raw.get("step")) if isinstance(raw, dict) else None
            self.error(line_of(raw) or line, f"this step cannot be read ({type(exc).__name__}: "
                       f"{one_line(str(exc))})", name)
            return None

    def parse_step_fields(self, raw: JsonValue, line: int | None,
                          workbook: Workbook) -> Step | None:
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
        self.unknown_keys(raw, STEP_KEYS, name, "")
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
        eval_mode = eval_mode_of(raw, spec, self.report_for(name))
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
            return Step(name=name, desc=opt_str(raw.get("desc") or raw.get("description")),
                        line=line, args=args, admit=admit, loop=loop, tasks=tuple(tasks),
                        set_ctx=set_ctx, vars=vars_block, next=nxt, enter=enter, exit=exit_rules,
                        eval_mode=eval_mode, listen=listen, case=case_spec,
                        spec=plain(spec) if isinstance(spec, dict) else {},
                        pool=str(pool) if pool else None)
        except ValidationError as exc:
            self.error(line, f"step does not fit the model: {exc.errors()[0]['msg']}", name)
            return None

    def parse_listeners(self, raw: JsonObject, step: str,
                        nxt: NextSpec) -> tuple[tuple[Rule, ...], NextSpec]:
        """An `eval_mode: on_event` step's `case:` as listen rules (dsl/dialects/listeners.py)."""
        line = line_of(raw, "case")
        ir = compile_listeners(raw.get("case"), step=step, line=line or line_of(raw), next_spec=nxt,
                               report=self.report_for(step))
        for rule in ir.listen:
            self.check_templates([rule.when, rule.set_ctx, rule.result], rule.line or line, step,
                                 "case")
        self.check_templates([a.args for a in ir.next.arcs if a.route], line, step, "case.next")
        return ir.listen, ir.next

    def parse_spec001(self, raw: JsonObject, step: str, tasks: list[Task], nxt: NextSpec,
                      workbook: Workbook
                      ) -> tuple[list[Task], NextSpec, CaseSpec]:
        """The spec 001 step form compiled into the canonical IR (dsl/dialects/v2_spec001.py)."""
        ir = compile_spec001(
            raw, step=step, tasks=tuple(tasks), next_spec=nxt,
            report=self.report_for(step), parse_task=self.task_parser_for(step, workbook))
        line = line_of(raw, "case")
        for task in ir.tasks:
            for rule in task.rules:
                self.check_templates([rule.when, rule.set_locals, rule.case_matched, rule.result],
                                     rule.line or line, step, "case")
        self.check_templates([[a.when, a.args] for a in ir.next.arcs], line, step, "case.next")
        return list(ir.tasks), ir.next, ir.case

    def parse_step_sinks(self, raw: JsonObject, step: str, tasks: list[Task],
                         workbook: Workbook, eval_mode: str) -> list[Task]:
        """Step-level `sink:` as storage tasks after the pipeline (dsl/dialects/sink.py)."""
        line = line_of(raw, "sink")
        if eval_mode == "on_event":
            self.error(line, "a listener runs no tool, so it has nothing to sink", step, "sink")
            return tasks
        sinks = step_sinks(raw["sink"], step=step, line=line,
                           report=self.report_for(step),
                           parse_task=self.task_parser_for(step, workbook))
        for sink in sinks:
            self.check_templates(sink.sink.when if sink.sink else None, line, step, "sink.when")
        return append_sinks(tasks, sinks, report=self.report_for(step))

    def parse_case(self, raw: JsonObject, step: str, tasks: list[Task], nxt: NextSpec,
                   workbook: Workbook) -> CaseIR:
        """Step-level `case:` compiled into the canonical IR (dsl/dialects/case.py)."""
        line = line_of(raw, "case")
        case = compile_case(raw["case"], step=step, line=line, tasks=tuple(tasks), next_spec=nxt,
                            report=self.report_for(step),
                            parse_task=self.task_parser_for(step, workbook))
        rules = [*case.enter, *case.exit, *(r for t in case.tasks for r in t.rules)]
        for rule in rules:
            self.check_templates([rule.when, rule.set_ctx, rule.set_iter, rule.call, rule.result],
                                 rule.line or line, step, "case")
        self.check_templates([a.args for a in case.next.arcs if a.route], line, step, "case.next")
        return case

    def parse_admit(self, spec: JsonValue, raw: JsonObject, step: str) -> tuple[AdmitRule, ...]:
        rules: list[AdmitRule] = []
        if raw.get("when") is not None:
            # Older playbooks guard a step with `when:`; it means exactly an admission rule.
            rules += [AdmitRule(when=str(raw["when"]), allow=True), AdmitRule(when=None, allow=False)]
            self.check_guard(raw["when"], line_of(raw, "when"), step, "when")
        if not isinstance(spec, dict):
            return tuple(rules)
        policy = spec.get("policy")
        admit = policy.get("admit") if isinstance(policy, dict) else None
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

    def parse_step_set(self, raw: JsonObject, step: str) -> tuple[JsonObject, JsonObject]:
        ctx: JsonObject = {}
        vars_: JsonObject = {}
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
