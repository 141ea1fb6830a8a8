"""Parse a playbook's YAML into the canonical IR, collecting every issue before failing once.

Accepts the canonical v10 form (spec 002/003) and the keys NoETL uses today (ARCHITECTURE §8):
`set: {ctx.x, iter.y}` beside `set_ctx`/`set_iter`, `input` beside `args`, `output` beside
`outcome`, every task-list shape, and structural `next` as a string, a list, or `{spec, arcs}`.
The document's top level is read here; steps, tasks and arcs by the modules of dsl/parsing/
(loops: dsl/loops.py, keychain: dsl/keychain.py, step forms: dsl/dialects/).
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from noetl_stream import refs
from noetl_stream.dsl import (
    checks,
    execution_limits,
    executor_block,
    layering,
    net_checks,
    scripts,
    subscription,
)
from noetl_stream.dsl.implicit_end import route_leaves_to_end
from noetl_stream.dsl.keychain import parse_keychain
from noetl_stream.dsl.kinds import RUNNABLE_KINDS
from noetl_stream.dsl.models import Playbook, Step
from noetl_stream.dsl.parsing.base import Workbook, one_line, opt_str
from noetl_stream.dsl.parsing.steps import StepParser
from noetl_stream.dsl.source import line_of, load_yaml, plain
from noetl_stream.errors import Issue, PlaybookError, YamlSyntaxError
from noetl_stream.jsonutil import JsonObject, JsonValue

API_VERSION = "noetl.io/v2"
# metadata.name and .path ride in every command and event as messages.Text: its bound and the
# characters it refuses (the dsl does not import the message models).
MAX_META_TEXT = 4096
CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f-\x9f]")
TOP_KEYS = frozenset({"apiVersion", "kind", "metadata", "workload", "workflow", "workbook",
                      "keychain", "executor", "spec"})


@dataclass
class ParseResult:
    playbook: Playbook
    warnings: list[Issue] = field(default_factory=list)
    # The files its `script:` fields name, by uri as written: what travels with its text.
    scripts: dict[str, str] = field(default_factory=dict)


class _Parser(StepParser):
    # -- top level -------------------------------------------------------------------------
    def parse(self, doc: JsonValue) -> Playbook | None:
        if not isinstance(doc, dict):
            self.error(1, "a playbook is a YAML mapping with apiVersion, kind, metadata, workflow")
            return None
        self.unknown_keys(doc, TOP_KEYS, None, "", where="playbook")
        api, kind, meta = self.parse_header(doc)
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
        steps = self.parse_steps(raw_steps, workbook)
        if any(i.severity == "error" for i in self.issues):
            return None
        try:
            playbook = Playbook(
                api_version=str(api), kind=str(kind), name=str(meta.get("name")),
                path=opt_str(meta.get("path")), version=opt_str(meta.get("version")),
                description=opt_str(meta.get("description")), workload=plain(workload),
                steps=tuple(steps), executor=plain(executor) if isinstance(executor, dict) else {},
                keychain=keychain, file=self.file,
            )
        except ValidationError as exc:
            self.error(1, f"playbook does not fit the model: {exc}")
            return None
        for fld, message in executor_block.problems(playbook.executor,
                                                    {s.name for s in playbook.steps}, self.kinds):
            self.error(line_of(doc, "executor"), message, None, fld)
        for line, fld, message in execution_limits.problems(executor):
            self.error(line or line_of(doc, "executor"), message, None, fld)
        playbook = layering.apply(playbook)
        for step_name, line, fld, message in layering.problems(playbook):
            self.error(line if step_name else line_of(doc, "executor"), message, step_name, fld)
        self.issues.extend(checks.template_issues(playbook, strict=self.strict))
        if not any(i.severity == "error" for i in self.issues):  # else what runs is unknown
            self.issues.extend(net_checks.net_issues(playbook, strict=self.strict))
        return None if any(i.severity == "error" for i in self.issues) else playbook

    def parse_header(self, doc: JsonObject) -> tuple[JsonValue, JsonValue, JsonObject]:
        """`apiVersion`, `kind` and `metadata`, each checked."""
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
        for key in ("name", "path"):
            self.check_meta_text(meta, key)
        return api, kind, meta

    def check_meta_text(self, meta: JsonObject, key: str) -> None:
        """`metadata.name` and `.path` travel in every command and event of the execution, where
        text is 1 to MAX_META_TEXT printable characters: refused here, where the line is known.
        """
        value = meta.get(key)
        if value is None or (key == "name" and not value):
            return
        if (not isinstance(value, str) or not value or len(value) > MAX_META_TEXT
                or CONTROL_CHARS.search(value)):
            self.error(line_of(meta, key) or 1, f"metadata.{key} is text of 1 to "
                       f"{MAX_META_TEXT} characters without control characters", None,
                       f"metadata.{key}")

    def parse_steps(self, raw_steps: list[JsonValue], workbook: Workbook) -> list[Step]:
        """The workflow's steps, names unique, leaves routed to `end`, every arc's target there."""
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
        return steps

    def parse_workbook(self, raw: JsonValue, doc: JsonObject) -> Workbook:
        book: Workbook = {}
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
            if "tool" in entry:
                self.check_workbook_entry(entry, index, line)
            book[str(entry["name"])] = (entry, line)
        return book

    def check_workbook_entry(self, entry: JsonObject, index: int, line: int | None) -> None:
        """The keys beside an entry's `tool:`; NoETL's `sink:` there is read by no engine."""
        if "sink" in entry:
            self.not_supported(line_of(entry, "sink") or line, "a workbook entry's `sink:` "
                               "(NoETL's server reads it; no NoETL engine runs it) has no effect: "
                               "put the sink on the step that calls the task", None,
                               f"workbook[{index}].sink")
        self.unknown_keys({k: v for k, v in entry.items() if k != "sink"},
                          {"name", "tool", "desc", "description"}, None, f"workbook[{index}].")


# The last few successful parses, by text and options. `run` parses a playbook to check it and
# its embedded server parses the same text again as the request arrives: on a long playbook that
# second parse cost as much as the execution's steps. The IR is frozen, so it can be shared.
RECENT_PARSES = 8
_recent: OrderedDict[tuple[str, str, frozenset[str], bool], ParseResult] = OrderedDict()


def parse_playbook(text: str, file: str = "<string>", *, kinds: Collection[str] = RUNNABLE_KINDS,
                   strict: bool = False, base_dir: Path | None = None) -> ParseResult:
    """Parse and validate; raise PlaybookError with every issue, or return the IR and warnings.

    `base_dir` is the folder of the playbook's file, when it was read from disk: `script:` files
    are read relative to it. Without it, they must travel with the text (dsl/scripts.py).
    """
    key = (text, file, frozenset(kinds), strict)
    known = _recent.get(key)  # each OrderedDict call is atomic: parses may run in threads
    if known is not None:
        return ParseResult(known.playbook, list(known.warnings), dict(known.scripts))
    result = _parse(text, file, kinds, strict, base_dir)
    if not result.scripts:  # script files are read from disk (base_dir): such parses are not kept
        _recent[key] = result
        while len(_recent) > RECENT_PARSES:
            try:
                _recent.popitem(last=False)
            except KeyError:  # another thread emptied it first
                break
    return ParseResult(result.playbook, list(result.warnings), dict(result.scripts))


def _parse(text: str, file: str, kinds: Collection[str], strict: bool,
           base_dir: Path | None) -> ParseResult:
    try:
        own_text, attached = scripts.split_files(text)
    except ValueError as exc:
        raise PlaybookError([Issue(file, None, str(exc))]) from None
    parser = _Parser(file, kinds, strict, base_dir, attached)
    try:
        doc = load_yaml(own_text)
    except YamlSyntaxError as exc:
        raise PlaybookError([Issue(file, exc.line, str(exc))]) from None
    if subscription.is_subscription(doc):
        subscription.subscription_from_doc(doc, file)  # its own issues first
        raise PlaybookError([Issue(file, line_of(doc, "kind") or 1, subscription.NOT_RUN,
                                   field="kind")])
    try:
        playbook = parser.parse(doc)
    except Exception as exc:
        # Outside any step (metadata, keychain, workbook, ...): still one error, never a traceback.
        parser.error(1, f"the playbook cannot be read ({type(exc).__name__}: "
                        f"{one_line(str(exc))})")
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
