"""`next:` in the shapes NoETL accepts (a name, a list, `{spec, arcs}`, spec 001's `{to}`) as
`NextSpec`, and the check that every arc leads to a step that exists.
"""

from __future__ import annotations

from noetl_stream.dsl.dialects.v2_spec001 import structural_next
from noetl_stream.dsl.models import Arc, NextSpec, Step
from noetl_stream.dsl.parsing.base import ParserBase, split_set
from noetl_stream.dsl.source import line_of, suggest
from noetl_stream.jsonutil import JsonObject, JsonValue

# `spec` is NoETL's arc-level placeholder: its engines read nothing from it, and neither does this.
ARC_KEYS = frozenset({"step", "when", "args", "set", "input", "desc", "spec"})


def _list_mode(raw: list[JsonValue], next_mode: str | None) -> str:
    """The mode of a `next` list. Bare names, and targets none of which has a `when`, all fire:
    spec 004 §9.1 calls the list parallel routing. Targets with guards are NoETL's server's
    `Targets`, where the first that matches wins, as under `{spec, arcs}` (spec 003 §8.4:
    exclusive by default), so a trailing unguarded target is the fallback. The step's
    `spec.next_mode` decides either way for a list of targets.
    """
    targets = [item for item in raw if isinstance(item, dict)]
    if targets and next_mode:
        return next_mode
    return "exclusive" if any("when" in item for item in targets) else "inclusive"


class ArcParser(ParserBase):
    def parse_next(self, raw: JsonValue, step_node: JsonObject, step: str) -> NextSpec:
        line = line_of(step_node, "next")
        if raw is None:
            return NextSpec()
        if isinstance(raw, str):
            return NextSpec(mode="exclusive", arcs=(Arc(step=raw, line=line),))
        next_mode = self.next_mode(step_node, step)
        if isinstance(raw, list):
            arcs = [a for i, item in enumerate(raw) if (a := self.parse_arc(item, raw, i, step))]
            return NextSpec(mode=_list_mode(raw, next_mode), arcs=tuple(arcs))
        if isinstance(raw, dict):
            if "to" in raw:  # spec 001: every target fires
                return structural_next(raw, line=line, report=self.report_for(step))
            self.unknown_keys(raw, {"spec", "arcs"}, step, "next.")
            spec = raw.get("spec") or {}
            default = next_mode or "exclusive"
            mode = spec.get("mode", default) if isinstance(spec, dict) else default
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

    def next_mode(self, step_node: JsonObject, step: str) -> str | None:
        """The step's `spec.next_mode` (NoETL's server: the mode of a `next` list of targets and of
        `{arcs}` without its own `spec.mode`), or None when not given.
        """
        spec = step_node.get("spec")
        mode = spec.get("next_mode") if isinstance(spec, dict) else None
        if mode is None:
            return None
        if mode not in ("exclusive", "inclusive"):
            self.error(line_of(spec, "next_mode"), f'next_mode "{mode}" is not exclusive or '
                       "inclusive", step, "spec.next_mode")
            return None
        return str(mode)

    def parse_arc(self, item: JsonValue, seq: object, index: int, step: str) -> Arc | None:
        line = line_of(seq, index)
        if isinstance(item, str):
            return Arc(step=item, line=line)
        if isinstance(item, dict) and "step" not in item and ("then" in item or "next" in item):
            self.error(line, "NoETL form not run here: a `next` entry `{when, then: [...]}` or "
                       "`{next: [...]}` (NoETL's CLI runtime's older conditional); instead, write "
                       "one target per step: `{step: NAME, when: ...}`", step, f"next.arcs[{index}]")
            return None
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
        self.check_guard(when, line, step, f"next.arcs[{index}]")
        self.check_templates([args, set_ctx], line, step, f"next.arcs[{index}]")
        return Arc(step=str(item["step"]), when=None if when is None else str(when), args=args,
                   set_ctx=set_ctx, line=line)

    def check_graph(self, steps: list[Step]) -> None:
        names = {s.name for s in steps}
        for s in steps:
            for arc in s.next.arcs:
                if arc.step not in names and arc.step != "end":
                    self.error(arc.line or s.line, f'arc goes to step "{arc.step}", which does not '
                               f"exist{suggest(arc.step, names)}", s.name, "next")
