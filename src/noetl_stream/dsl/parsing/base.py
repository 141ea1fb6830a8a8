"""What every part of the playbook parser shares: the issue list and the checks that add to it.

Issues are collected, never raised: the parser reads the whole document and fails once with
all of them (errors.PlaybookError). The dialect compilers (dsl/dialects/) report through
`report_for(step)`, which records against the step being parsed.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from pathlib import Path

from noetl_stream.dsl import noetl_refused, templating
from noetl_stream.dsl.source import line_of, plain, suggest
from noetl_stream.errors import Issue
from noetl_stream.jsonutil import JsonObject, JsonValue

Workbook = dict[str, tuple[JsonObject, int | None]]
"""The playbook's named workbook tasks: name -> (raw entry, line)."""
Report = Callable[[int | None, str, str], None]
"""report(line, message, field): record an error against one step."""


class ParserBase:
    def __init__(self, file: str, kinds: Collection[str], strict: bool,
                 base_dir: Path | None = None, attached: dict[str, str] | None = None) -> None:
        self.file = file
        self.kinds = kinds
        self.strict = strict
        self.base_dir = base_dir
        self.workload: JsonObject = {}  # a script's uri may read it (scripts.parse_script)
        self.attached = attached or {}
        self.scripts: dict[str, str] = {}
        self.issues: list[Issue] = []

    # -- issue helpers ---------------------------------------------------------------------
    def error(self, line: int | None, message: str, step: str | None = None,
              field: str | None = None) -> None:
        self.issues.append(Issue(self.file, line, message, step, field))

    def unknown_keys(self, node: object, known: Collection[str], step: str | None,
                     prefix: str, *, where: str | None = None, kind: str | None = None) -> None:
        """Keys of `node` not in `known`: a warning (an error under --strict); a NoETL form
        refused at `where` (noetl_refused.py) is an error that says what to write instead.
        """
        if not isinstance(node, dict):
            return
        for key in node:
            refused = noetl_refused.field_message(where, kind, str(key)) \
                if where is not None and key not in known else None
            if refused is not None:
                self.error(line_of(node, key), refused, step, f"{prefix}{key}")
            elif key not in known:
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

    def check_templates(self, value: object, line: int | None, step: str | None, fld: str,
                        hint: str = "") -> None:
        for text in templating.template_strings(value):
            problem = templating.syntax_problem(text)
            if problem:
                shown = text if len(text) <= 120 else text[:117] + "..."
                self.error(line, f"template {shown!r} does not parse: {problem}{hint}", step, fld)
            for name in sorted(templating.called_names(text) & noetl_refused.TEMPLATE_GLOBALS.keys()):
                self.error(line, noetl_refused.template_global_message(name), step, fld)

    def check_guard(self, when: object, line: int | None, step: str | None, fld: str) -> None:
        """A `when` guard: a template, or an expression written without braces."""
        if isinstance(when, str) and when.strip() and not templating.has_template(when):
            when = "{{ " + when + " }}"
        self.check_templates(when, line, step, fld)

    def report_for(self, step: str | None) -> Report:
        """The `report` callback the dialect compilers take: errors recorded against `step`."""
        def report(line: int | None, message: str, fld: str) -> None:
            self.error(line, message, step, fld)
        return report

    def mapping(self, node: Mapping[str, JsonValue], key: str, step: str | None,
                fld: str) -> JsonObject:
        value = node.get(key)
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.error(line_of(node, key), "must be a mapping", step, fld)
            return {}
        return plain(value)

    def split_rule(self, entry: JsonValue, seq: object, index: int, step: str | None,
                   fld: str) -> tuple[str | None, JsonObject | None, int | None]:
        """Return (when, then, line) for `{when, then}`, `{else: {then}}`, `{else: {...}}` or
        `{else: null, then}`.
        """
        line = line_of(seq, index)
        if not isinstance(entry, dict):
            self.error(line, "a rule is a mapping with `when` and `then`", step, f"{fld}.rules")
            return None, None, line
        if "else" in entry:
            body = entry["else"]
            then = body.get("then", body) if isinstance(body, dict) else None
            if body is None:  # `- else:` with `then:` beside it, as some NoETL examples indent it
                then = entry.get("then")
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


def split_set(values: Mapping[str, JsonValue]) -> tuple[JsonObject, JsonObject, JsonObject]:
    """Split NoETL's `set: {ctx.x, iter.y, z}` into (ctx, iter, locals)."""
    ctx: JsonObject = {}
    it: JsonObject = {}
    local: JsonObject = {}
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


def opt_str(value: object) -> str | None:
    return None if value is None else str(value)


def one_line(text: str) -> str:
    return " ".join(text.split())[:300]
