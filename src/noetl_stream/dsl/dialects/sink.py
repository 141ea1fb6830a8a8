"""Compile `sink` (spec 004 §10, spec 000 §3) into storage tasks of the canonical IR.

A sink is a task of any tool kind marked with `Task.sink`: its templates read the data to store
as `result` / `data` and the call's envelope as `this`, and the pipeline's result stays what it
was. The step-level clause becomes tasks appended to the step's pipeline, so they run after its
last call; a `do: break` of the step's own rules becomes a jump to the first sink, so a step that
ends early still stores. The case action becomes `Rule.sink`, run when its rule fires.

Forms: `{tool: {kind, ...}, table, mode, key, args, when}` or the shorthand `{kind, ...}` with
the tool's fields beside the sink's. With `table` (postgres, duckdb) the command is generated:
`INSERT INTO table (columns of args) VALUES (...)`, and `mode: upsert` with `key` adds
`ON CONFLICT (key) DO UPDATE`; the values of `args` are templates bound as parameters. Without
`table`, `args` are the task's inputs and the tool's own command does the writing.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from noetl_stream.dsl.models import Rule, SinkSpec, Task
from noetl_stream.dsl.source import line_of, suggest
from noetl_stream.jsonutil import JsonObject, JsonValue

SINK_KEYS = frozenset({"tool", "table", "mode", "key", "args", "when", "desc"})
TABLE_KEYS = ("table", "mode", "key")  # sink fields that may also be written inside `tool`
MODES = ("insert", "upsert")
PLACEHOLDER = {"postgres": ":", "duckdb": "$"}  # how each SQL kind names a mapping parameter
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

Report = Callable[[int | None, str, str], None]
"""report(line, message, field): record an error against the step being parsed."""
ParseTask = Callable[[str, JsonObject, int | None], Task | None]
"""parse_task(name, body, line): a tool body parsed as any task of the step (parser.py)."""


def compile_sink(raw: JsonValue, *, name: str, line: int | None, field: str, report: Report,
                 parse_task: ParseTask) -> Task | None:
    """One sink mapping as a storage task named `name`, or None after reporting why not."""
    if not isinstance(raw, dict):
        report(line, "a sink is a mapping: `{tool: {kind, ...}, table, args, when}`", field)
        return None
    line = line_of(raw) or line
    if "tool" in raw:
        for key in raw:
            if key not in SINK_KEYS:
                report(line_of(raw, key) or line, f'unknown sink key "{key}"'
                       f"{suggest(str(key), SINK_KEYS)}", f"{field}.{key}")
        tool = raw["tool"]
    else:  # the shorthand: the tool's fields beside the sink's
        tool = {k: v for k, v in raw.items() if k not in SINK_KEYS or k in TABLE_KEYS}
    if not isinstance(tool, dict) or not tool.get("kind"):
        report(line, "a sink needs a tool: `tool: {kind: postgres|duckdb|..., ...}`", field)
        return None
    tool = dict(tool)
    sink_fields = {k: tool.pop(k) for k in TABLE_KEYS if k in tool}
    sink_fields.update({k: raw[k] for k in TABLE_KEYS if k in raw})
    args = raw.get("args")
    if args is not None and not isinstance(args, dict):
        report(line, "sink `args` must be a mapping", f"{field}.args")
        return None
    if sink_fields.get("table") is not None:
        generated = _table_command(str(tool["kind"]), sink_fields, args, tool, line, field, report)
        if generated is None:
            return None
        tool.update(generated)
    elif sink_fields:
        report(line, f"`{next(iter(sink_fields))}` needs `table`", field)
        return None
    elif args:
        own = tool.get("args") or {}
        # A tool's own `args` that is not a mapping stays as written: the task reports it.
        tool["args"] = {**own, **args} if isinstance(own, dict) else own
    task = parse_task(name, tool, line)
    if task is None:
        return None
    when = raw.get("when")
    return task.model_copy(update={"sink": SinkSpec(when=None if when is None else str(when),
                                                    source=field)})


def _table_command(kind: str, fields: JsonObject, args: JsonObject | None,
                   tool: JsonObject, line: int | None, field: str,
                   report: Report) -> JsonObject | None:
    """`table` + `args` (+ `mode`, `key`) as the `command` and `params` of a SQL kind."""
    mark = PLACEHOLDER.get(kind)
    if mark is None:
        report(line, f'`table` is for the {" and ".join(PLACEHOLDER)} kinds, not "{kind}"; '
               "write the tool's own fields instead", f"{field}.table")
        return None
    if "command" in tool or "query" in tool:
        report(line, "a sink has `table` or a `command`, not both", f"{field}.table")
        return None
    table = str(fields["table"])
    if not all(_IDENT.match(part) for part in table.split(".")):
        report(line, f'table "{table}" is not a name (or schema.name)', f"{field}.table")
        return None
    if not args:
        report(line, "a sink with `table` needs `args`: the columns and their values",
               f"{field}.args")
        return None
    columns = [str(c) for c in args]
    bad = [c for c in columns if not _IDENT.match(c)]
    if bad:
        report(line, f'sink column "{bad[0]}" is not a name', f"{field}.args")
        return None
    mode = str(fields.get("mode") or "insert")
    if mode not in MODES:
        report(line, f'sink mode "{mode}" is not one of {", ".join(MODES)}'
               f"{suggest(mode, MODES)}", f"{field}.mode")
        return None
    raw_key = fields.get("key")
    keys = [str(k) for k in (raw_key if isinstance(raw_key, list) else [raw_key] if raw_key else [])]
    if mode == "upsert" and (not keys or any(k not in columns for k in keys)):
        report(line, "`mode: upsert` needs `key`: one or more of the columns in `args`",
               f"{field}.key")
        return None
    sql = (f"INSERT INTO {table} ({', '.join(columns)}) "
           f"VALUES ({', '.join(mark + c for c in columns)})")
    if mode == "upsert":
        rest = [c for c in columns if c not in keys]
        action = ("DO UPDATE SET " + ", ".join(f"{c} = excluded.{c}" for c in rest)
                  if rest else "DO NOTHING")
        sql += f" ON CONFLICT ({', '.join(keys)}) {action}"
    return {"command": sql, "params": dict(args)}


def step_sinks(raw: JsonValue, *, step: str, line: int | None, report: Report,
               parse_task: ParseTask) -> list[Task]:
    """A step's `sink:` (one mapping or a list of them) as its storage tasks, in order."""
    items = raw if isinstance(raw, list) else [raw]
    single = not isinstance(raw, list)
    out = []
    for index, item in enumerate(items):
        fld = "sink" if single else f"sink[{index}]"
        name = f"{step}_sink" if single else f"{step}_sink_{index}"
        item_line = line if single else line_of(raw, index) or line
        task = compile_sink(item, name=name, line=item_line, field=fld, report=report,
                            parse_task=parse_task)
        if task is not None:
            out.append(task)
    return out


def append_sinks(tasks: list[Task], sinks: list[Task], *, report: Report) -> list[Task]:
    """The pipeline with `sinks` after its last task; a `do: break` jumps to the first sink."""
    if not sinks:
        return tasks
    names = {t.name for t in tasks}
    for sink in sinks:
        if sink.name in names:
            report(sink.line, f'task name "{sink.name}" is taken; rename the task', "sink")
            return tasks
    first = sinks[0].name

    def redirect(rule: Rule) -> Rule:
        return rule.model_copy(update={"do": "jump", "to": first}) if rule.do == "break" else rule

    out = [t.model_copy(update={"rules": tuple(redirect(r) for r in t.rules)}) for t in tasks]
    return [*out, *sinks]


def rule_sinks(raw: JsonValue, *, step: str, index: int, line: int | None, report: Report,
               parse_task: ParseTask) -> tuple[Task, ...]:
    """A case entry's `sink` action (one mapping or a list of them) as `Rule.sink` tasks."""
    items = raw if isinstance(raw, list) else [raw]
    out = []
    for position, item in enumerate(items):
        fld = f"case[{index}].then.sink" + ("" if len(items) == 1 else f"[{position}]")
        name = f"{step}_case{index}_sink" + ("" if len(items) == 1 else f"_{position}")
        task = compile_sink(item, name=name, line=line, field=fld, report=report,
                            parse_task=parse_task)
        if task is None:
            continue
        if task.rules or task.poll is not None:
            report(line, "a case `sink` runs once when its rule fires: `retry`, `poll` and "
                   "policy rules are for the step-level `sink:` clause", fld)
            continue
        out.append(task)
    return tuple(out)
