"""`loop:` in its two forms: over a collection (`in:`) and over claimed work (`cursor:`).

A cursor loop (NoETL's `spec.mode: cursor`) has no collection: each iteration claims one item
with `loop.cursor.claim` (SQL that marks a row claimed and returns it) and runs the step's tasks
on it, until claims come back empty. `max_in_flight` may be a template, rendered by the router
when the loop starts; here it only has to parse.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Protocol

from pydantic import ValidationError

from noetl_stream.dsl import templating
from noetl_stream.dsl.models import CursorSpec, LoopSpec
from noetl_stream.dsl.source import line_of, plain
from noetl_stream.jsonutil import JsonObject, JsonValue

LOOP_KEYS = frozenset({"in", "collection", "iterator", "element", "spec", "mode", "max_in_flight",
                       "cursor"})
CURSOR_KEYS = frozenset({"kind", "claim", "auth", "connection", "options"})
# NoETL's frame knobs batch several claimed rows per worker command. Here every iteration claims
# one row (`__frame_max_rows` is 1), so the knobs change nothing but speed and are only warned
# about; `process: frame` would change what the tasks see, so it is refused.
FRAME_KEYS = frozenset({"max_rows", "max_seconds", "max_bytes", "lease_seconds",
                        "heartbeat_seconds", "row_concurrency", "process", "retry_mode",
                        "max_attempts", "verify_ipc"})
MODES = ("sequential", "parallel", "cursor")


class Reporter(Protocol):
    """The parser's issue collector, as this module uses it."""

    def error(self, line: int | None, message: str, step: str | None = None,
              field: str | None = None) -> None: ...

    def warning(self, line: int | None, message: str, step: str | None = None,
                field: str | None = None) -> None: ...

    def unknown_keys(self, node: object, known: Collection[str], step: str | None,
                     prefix: str) -> None: ...

    def check_templates(self, value: object, line: int | None, step: str | None, fld: str) -> None: ...


def parse_loop(raw: JsonValue, step: str, report: Reporter, kinds: Collection[str]) -> LoopSpec | None:
    """The step's `loop:` as IR, reporting every problem with its line; None when unusable."""
    if not isinstance(raw, dict):
        report.error(None, "loop must be a mapping with `in` (or `cursor`) and `iterator`", step,
                     "loop")
        return None
    report.unknown_keys(raw, LOOP_KEYS, step, "loop.")
    line = line_of(raw)
    collection = raw.get("in", raw.get("collection"))
    iterator = raw.get("iterator", raw.get("element"))
    spec = raw.get("spec") or {}
    if not isinstance(spec, dict):
        report.error(line, "loop.spec must be a mapping", step, "loop.spec")
        spec = {}
    mode = spec.get("mode", raw.get("mode"))
    claims = raw.get("cursor") is not None or mode == "cursor"
    cursor = _parse_cursor(raw, collection, mode, step, report, kinds) if claims else None
    if not claims and collection is None:
        report.error(line, "loop needs `in:` (or `collection:`), or a `cursor:` to claim from",
                     step, "loop.in")
    if not iterator:
        report.error(line, "loop needs `iterator:` (or `element:`)", step, "loop.iterator")
    elif iterator == "parent":
        report.error(line, 'iterator "parent" is reserved: `iter.parent` is the outer '
                     "iteration (spec 002 §6.4); choose another name", step, "loop.iterator")
    if mode is None:
        mode = "cursor" if claims else "sequential"
    if mode not in MODES:
        report.error(line, f'loop mode "{mode}" is not sequential, parallel or cursor', step,
                     "loop.spec.mode")
        mode = "sequential"
    _check_frame(spec.get("frame"), mode, line_of(spec, "frame") or line, step, report)
    limit_ok, limit = _max_in_flight(spec.get("max_in_flight", raw.get("max_in_flight")), line,
                                     step, report)
    report.check_templates(collection, line, step, "loop.in")
    if not iterator or not limit_ok or (cursor is None if claims else collection is None):
        return None
    try:
        return LoopSpec(collection=plain(collection), iterator=str(iterator), mode=mode,
                        max_in_flight=limit, cursor=cursor, spec=plain(spec), line=line)
    except ValidationError as exc:
        report.error(line, f"loop does not fit the model: {exc}", step, "loop")
        return None


def _max_in_flight(value: JsonValue, line: int | None, step: str,
                   report: Reporter) -> tuple[bool, int | str | None]:
    """(ok, value): a positive whole number, a template string (rendered when the loop starts)
    or None when absent; not ok after reporting anything else.
    """
    if value is None:
        return True, None
    if isinstance(value, str) and templating.has_template(value):
        report.check_templates(value, line, step, "loop.spec.max_in_flight")
        return True, value
    whole = positive_int(value)
    if whole is None:
        report.error(line, "max_in_flight must be a positive whole number or a template giving "
                     f"one, got {value!r}", step, "loop.spec.max_in_flight")
        return False, None
    return True, whole


def positive_int(value: object) -> int | None:
    """`value` as a whole number >= 1 (an int, or text of digits), else None; True is not 1."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 1 else None
    if isinstance(value, float) and value.is_integer() and value >= 1:
        return int(value)
    if isinstance(value, str) and value.strip().isdigit() and int(value.strip()) >= 1:
        return int(value.strip())
    return None


def _parse_cursor(raw: JsonObject, collection: JsonValue, mode: JsonValue, step: str, report: Reporter,
                  kinds: Collection[str]) -> CursorSpec | None:
    node = raw.get("cursor")
    line = line_of(raw, "cursor") or line_of(raw)
    if node is None:
        report.error(line, "loop mode cursor needs `loop.cursor` with a `claim:` query", step,
                     "loop.cursor")
        return None
    if not isinstance(node, dict):
        report.error(line, "loop.cursor must be a mapping with `kind`, `auth` and `claim`", step,
                     "loop.cursor")
        return None
    report.unknown_keys(node, CURSOR_KEYS, step, "loop.cursor.")
    ok = True
    if collection is not None:
        report.error(line, "a loop takes `in:` or `cursor:`, not both", step, "loop.cursor")
        ok = False
    if mode not in (None, "cursor"):
        report.error(line, f'a loop with `cursor:` runs in mode cursor, not "{mode}"', step,
                     "loop.spec.mode")
        ok = False
    claim = node.get("claim")
    if not isinstance(claim, str) or not claim.strip():
        report.error(line, "loop.cursor needs `claim:`, the SQL that claims one item and returns "
                     "it (no row: nothing left)", step, "loop.cursor.claim")
        ok = False
    kind = str(node.get("kind") or "postgres")
    if kind not in kinds:
        report.error(line_of(node, "kind") or line, f'unknown kind "{kind}" for loop.cursor; '
                     "claims run on postgres", step, "loop.cursor.kind")
        ok = False
    if node.get("auth") is None and node.get("connection") is None:
        report.error(line, "loop.cursor needs `auth:` (a credential name) or `connection:` to "
                     "reach the database it claims from", step, "loop.cursor.auth")
        ok = False
    options = node.get("options") or {}
    if not isinstance(options, dict):
        report.error(line, "loop.cursor.options must be a mapping", step, "loop.cursor.options")
        ok = False
    for fld in ("claim", "auth", "connection"):
        report.check_templates(node.get(fld), line, step, f"loop.cursor.{fld}")
    if not ok:
        return None
    return CursorSpec(kind=kind, claim=str(claim), auth=plain(node.get("auth")),
                      connection=plain(node.get("connection")), options=plain(options), line=line)


def _check_frame(frame: JsonValue, mode: str, line: int | None, step: str, report: Reporter) -> None:
    if frame is None:
        return
    if mode != "cursor" or not isinstance(frame, dict):
        report.error(line, "loop.spec.frame is a mapping that only cursor loops take", step,
                     "loop.spec.frame")
        return
    report.unknown_keys(frame, FRAME_KEYS, step, "loop.spec.frame.")
    if str(frame.get("process", "row")) != "row":
        report.error(line, f'frame process "{frame.get("process")}" is not supported: each '
                     "iteration runs the tasks on one claimed row (process: row)", step,
                     "loop.spec.frame.process")
    tuning = sorted(k for k in frame if k in FRAME_KEYS and k != "process")
    if tuning:
        report.warning(line, f"frame {', '.join(tuning)} not used: each iteration claims one row "
                       "(`__frame_max_rows` is 1); max_in_flight sets how many claim at once",
                       step, "loop.spec.frame")
