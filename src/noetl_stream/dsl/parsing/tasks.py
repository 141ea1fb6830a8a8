"""A step's `tool:` as tasks: every task-list shape, workbook references, scripts, aliases,
a task's policy rules, and the `retry:` / `poll:` clauses on a task or on its step.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from pydantic import ValidationError

from noetl_stream.dsl import (
    http_auth_map,
    noetl_refused,
    pg_connection,
    pycode,
    required,
    scripts,
    support,
    transfer,
)
from noetl_stream.dsl.dialects.retry import compile_poll, compile_retry, inherit_retry
from noetl_stream.dsl.kinds import (
    COMMON_TASK_KEYS,
    KIND_FIELDS,
    NOETL_KINDS_NOT_BUILT,
    NOETL_KINDS_REFUSED,
    field_aliases,
)
from noetl_stream.dsl.models import PollSpec, Rule, Task
from noetl_stream.dsl.parsing.base import ParserBase, Workbook, opt_str, split_set
from noetl_stream.dsl.source import as_float, as_int, line_of, plain, suggest
from noetl_stream.jsonutil import JsonObject, JsonValue

RULE_THEN_KEYS = frozenset({"do", "attempts", "max_attempts", "backoff", "delay", "max_delay", "to",
                            "set_ctx", "set_iter", "set"})
CODE_TEMPLATE_HINT = ("; python code is rendered like every field, so `{{` and `{%` start templates "
                      "(as in NoETL): wrap literal ones in {% raw %}...{% endraw %}")

ParseTask = Callable[[str, JsonValue, int | None], Task | None]
"""parse_task(name, tool body, line): a tool body parsed as any task of one step."""


def verbatim(config: Mapping[str, JsonValue], key: str) -> bool:
    """Whether a config field is taken as written, not rendered as a template: the `script`
    descriptor, and python code read from a script file (NoETL runs such files as they are).
    """
    return key == "script" or (key == "code" and "script" in config)


class TaskParser(ParserBase):
    def task_parser_for(self, step: str, workbook: Workbook) -> ParseTask:
        """The `parse_task` callback the dialect compilers take: a body parsed as a task of `step`."""
        def parse_task(name: str, body: JsonValue, line: int | None) -> Task | None:
            return self.parse_task(name, body, line, step, workbook)
        return parse_task

    def parse_tools(self, raw: JsonValue, step_node: JsonObject, step: str,
                    workbook: Workbook) -> list[Task]:
        if raw is None:
            return [Task(name=f"{step}_task", kind="noop", line=line_of(step_node))]
        tasks: list[Task] = []
        names: set[str] = set()
        for name, body, line in self.task_entries(raw, step_node, step):
            task = self.parse_task(name, body, line, step, workbook)
            if task is None:
                continue
            if task.name in names:
                self.error(line, f'task name "{task.name}" is used twice', step, "tool.name")
            names.add(task.name)
            tasks.append(task)
        self.check_jumps(tasks, names, step)
        return tasks

    def task_entries(self, raw: JsonValue, step_node: JsonObject,
                     step: str) -> list[tuple[str, JsonValue, int | None]]:
        """(name, body, line) of each task in any of the shapes `tool:` takes."""
        if isinstance(raw, dict) and "kind" in raw:
            return [(f"{step}_task", raw, line_of(step_node, "tool"))]
        if not isinstance(raw, list):
            self.error(line_of(step_node, "tool"), "tool must be a task or a list of tasks", step, "tool")
            return []
        entries: list[tuple[str, JsonValue, int | None]] = []
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
        return entries

    def check_jumps(self, tasks: list[Task], names: set[str], step: str) -> None:
        for task in tasks:
            for rule in task.rules:
                if rule.do == "jump" and rule.to not in names:
                    self.error(rule.line, f'jump target "{rule.to}" is not a task of this step'
                               f"{suggest(str(rule.to), names)}", step, f"tool.{task.name}.spec.policy")

    def parse_task(self, name: str, body: JsonValue, line: int | None, step: str,
                   workbook: Workbook, depth: int = 0) -> Task | None:
        if not isinstance(body, dict):
            self.error(line, "a task must be a mapping", step, "tool")
            return None
        kind = str(body.get("kind"))
        if kind == "workbook":
            return self.inline_workbook(name, body, line, step, workbook, depth)
        if not self.check_kind(kind, body, line, step):
            return None
        config = self.task_config(kind, body, line, step)
        inputs = self.mapping(body, "input", step, "tool.input")
        inputs.update(self.mapping(body, "args", step, "tool.args"))
        spec = body.get("spec") or {}
        rules, has_policy = self.policy_rules(spec, step)
        set_ctx, set_iter, set_locals = split_set(self.mapping(body, "set", step,
                                                               f"tool.{name}.set"))
        set_ctx.update(self.mapping(body, "set_ctx", step, f"tool.{name}.set_ctx"))
        set_iter.update(self.mapping(body, "set_iter", step, f"tool.{name}.set_iter"))
        self.check_spec_fields(kind, spec, line, step)
        self.check_required(kind, name, body, line, step)
        self.check_config_templates(kind, config, body, line, step)
        self.check_templates(inputs, line, step, "tool.input")
        spec_plain = {k: v for k, v in plain(spec).items() if k != "policy"} if isinstance(spec, dict) else {}
        if kind == "playbook" and "timeout" in config:
            # NoETL's playbook tool waits `timeout` seconds for the child: here the task's timeout.
            spec_plain.setdefault("timeout", config.pop("timeout"))
        clause, poll = self.parse_retry_poll(body, step, "tool.", line)
        return Task(name=name, kind=kind, config=config, input=inputs, rules=(*clause, *rules),
                    has_policy=has_policy, set_ctx=set_ctx, set_iter=set_iter, set_locals=set_locals,
                    spec=spec_plain, poll=poll, line=line)

    def check_kind(self, kind: str, body: JsonObject, line: int | None, step: str) -> bool:
        """Whether this runtime runs `kind`; if not, say whether it is unknown or not built yet."""
        if kind in self.kinds:
            return True
        known = sorted(set(self.kinds) | set(KIND_FIELDS))
        refused = NOETL_KINDS_REFUSED.get(kind)
        if refused is not None:
            refused = f'tool kind "{kind}" is not supported: {refused}'
        elif kind not in KIND_FIELDS:
            refused = noetl_refused.kind_message(kind)
        if refused is not None:
            self.error(line_of(body, "kind") or line, refused, step, "tool.kind")
        elif kind in KIND_FIELDS or kind in NOETL_KINDS_NOT_BUILT:
            self.error(line_of(body, "kind") or line, f'tool kind "{kind}" is not available in '
                       "this version of noetl-stream yet", step, "tool.kind")
        else:
            self.error(line_of(body, "kind") or line,
                       f'unknown tool kind "{kind}"{suggest(kind, known)}', step, "tool.kind")
        return False

    def task_config(self, kind: str, body: JsonObject, line: int | None,
                    step: str) -> JsonObject:
        """The kind's fields of a task body: aliases resolved, scripts read, base64 decoded."""
        fields = KIND_FIELDS.get(kind, frozenset())
        self.unknown_keys(body, COMMON_TASK_KEYS | fields | frozenset(field_aliases(kind)), step,
                          "tool.", where="tool", kind=kind)
        # `name` is the task's name, except where the kind reads it as a field (secrets).
        config = self.resolve_aliases(kind, body, line, step, {
            k: plain(v) for k, v in body.items()
            if k not in COMMON_TASK_KEYS or (k == "name" and k in fields)})
        if kind == "postgres":
            config = pg_connection.fold(config, lambda fld, message: self.error(
                line_of(body, fld) or line, message, step, f"tool.{fld}"))
        if kind in ("postgres", "duckdb") and isinstance(commands := config.get("command"), list):
            # NoETL's `commands:` list of SQL statements (a shell `command:` list is an argv)
            config["command"] = pg_connection.joined_statements(commands)
        # Older spellings count under the field's name: `credential` beside `connection` is
        # shadowed like `auth` is.
        spelled = {k: v for k, v in body.items() if k not in field_aliases(kind)} | config
        inline = scripts.inline_code(kind, config)
        source = scripts.inline_source(kind, config)
        if source is not None:  # NoETL's script.source.code
            del spelled["script"]
            if inline[scripts.SCRIPT_FIELD[kind]] != source["code"]:
                self.not_supported(line_of(body, "script") or line, "script.source.code is "
                                   "ignored: the flat field is given, and it wins", step,
                                   "tool.script")
        for key, why in support.ignored_fields(kind, spelled):
            self.not_supported(line_of(body, key) or line, why, step, f"tool.{key}")
        config = inline
        if kind == "nats" and (problem := support.nats_operation_problem(body)):
            self.error(line_of(body, "operation") or line, problem, step, "tool.operation")
        if kind == "http" and http_auth_map.is_auth_map(auth := config.get("auth")):
            unwrapped = http_auth_map.unwrap(auth)  # NoETL's {alias: {type, key}}
            if isinstance(unwrapped, str):
                self.error(line_of(body, "auth") or line, unwrapped, step, "tool.auth")
            else:
                config["auth"] = unwrapped
        if kind == "http" and (problem := noetl_refused.http_auth_message(body.get("auth"))):
            self.error(line_of(body, "auth") or line, problem, step, "tool.auth.type")
        if "script" in config and kind in scripts.SCRIPT_FIELD:
            config = self.load_script(kind, config, body, line, step)
        else:
            config = scripts.decode_b64(kind, config, lambda fld, message: self.error(
                line_of(body, fld) or line, message, step, f"tool.{fld}"))
        if kind == "python" and body.get("libs") is not None:
            self.python_libs(config, body, line, step)
        return config

    def python_libs(self, config: JsonObject, body: JsonObject, line: int | None,
                    step: str) -> None:
        config["libs"], packages = pycode.normalize_libs(config.get("libs"))
        for package in packages:
            self.not_supported(line_of(body, "libs") or line, f'libs entry "{package}" is '
                               "not a module name (a package to install?); nothing is "
                               "imported for it: install packages on the workers", step,
                               "tool.libs")
        pycode.check_libs(config["libs"], lambda fld, message: self.error(
            line_of(body, "libs") or line, message, step, f"tool.{fld}"))

    def policy_rules(self, spec: JsonValue, step: str) -> tuple[list[Rule], bool]:
        """A task's `spec.policy.rules`, and whether it has a policy with rules at all."""
        policy = spec.get("policy") if isinstance(spec, dict) else None
        if not (isinstance(policy, dict) and "rules" in policy):
            return [], False
        raw_rules = policy["rules"]
        if not isinstance(raw_rules, list):
            self.error(line_of(policy, "rules"), "rules must be a list", step, "tool.spec.policy.rules")
            raw_rules = []
        rules = [rule for index, entry in enumerate(raw_rules)
                 if (rule := self.parse_rule(entry, raw_rules, index, step)) is not None]
        return rules, True

    def check_spec_fields(self, kind: str, spec: JsonValue, line: int | None, step: str) -> None:
        """Tool fields written under `spec:` (the "v10" layout of some NoETL examples): NoETL's
        engines read them beside `kind:` and so does this runtime; under `spec:` they would do
        nothing.
        """
        if not isinstance(spec, dict):
            return
        misplaced = sorted(k for k in spec if k != "timeout" and (
            k in KIND_FIELDS.get(kind, ()) or k in ("input", "args")))
        for key in misplaced:
            self.error(line_of(spec, key) or line, f"NoETL form not run here: `{key}` under the "
                       f"task's `spec:` (no NoETL engine reads tool fields there); instead, write "
                       f"`{key}:` beside `kind:`", step, f"tool.spec.{key}")

    def check_required(self, kind: str, name: str, body: JsonObject, line: int | None,
                       step: str) -> None:
        """The field a kind cannot run without (dsl/required.py), the same way for every kind."""
        if kind == "transfer":
            self.check_transfer(body, line, step)
        missing = required.missing_field(kind, body)
        if missing is not None:
            fld, message = missing
            where = "tool." if name == f"{step}_task" else f"tool.{name}."
            if where != "tool.":
                message = message.replace(" task needs", f' task "{name}" needs', 1)
            self.error(line, message, step, where + fld)

    def check_config_templates(self, kind: str, config: JsonObject, body: JsonObject,
                               line: int | None, step: str) -> None:
        for key, value in config.items():
            if verbatim(config, key):
                continue
            from_script = "script" in config and key == scripts.SCRIPT_FIELD.get(kind)
            fld = "tool.script" if from_script else f"tool.{key}"
            hint = CODE_TEMPLATE_HINT if kind == "python" and key == "code" else ""
            self.check_templates(value, line_of(body, "script" if from_script else key) or line,
                                 step, fld, hint)

    def check_transfer(self, body: JsonObject, line: int | None, step: str) -> None:
        """A transfer's source and target types and required fields, where no template decides them."""
        for problem in transfer.problems(plain(body), rendered=False):
            node: JsonValue = body
            at = line
            for key in problem.path:
                at = line_of(node, key) or at
                node = node.get(key) if isinstance(node, dict) else None
            self.error(at, problem.message, step, "tool." + ".".join(problem.path))

    def load_script(self, kind: str, config: JsonObject, body: JsonObject,
                    line: int | None, step: str) -> JsonObject:
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

    def resolve_aliases(self, kind: str, body: JsonObject, line: int | None, step: str,
                        config: JsonObject) -> JsonObject:
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

    def parse_retry_poll(self, node: JsonObject, step: str, prefix: str,
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

    def parse_step_retry(self, raw: JsonObject, step: str, tasks: list[Task]) -> list[Task]:
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

    def inline_workbook(self, name: str, body: JsonObject, line: int | None, step: str,
                        workbook: Workbook, depth: int) -> Task | None:
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

    def parse_rule(self, entry: JsonValue, seq: object, index: int, step: str) -> Rule | None:
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
            return Rule(when=when, do=then.get("do", "continue"), attempts=as_int(attempts),
                        backoff=then.get("backoff", "fixed"), delay=as_float(then.get("delay", 0) or 0),
                        max_delay=then.get("max_delay"), to=opt_str(then.get("to")),
                        set_ctx=set_ctx, set_iter=set_iter, set_locals=set_locals, line=line)
        except (ValidationError, ValueError, TypeError) as exc:
            detail = exc.errors()[0]["msg"] if isinstance(exc, ValidationError) else str(exc)
            self.error(line, f"rule is invalid: {detail}", step, f"tool.spec.policy.rules[{index}]")
            return None
