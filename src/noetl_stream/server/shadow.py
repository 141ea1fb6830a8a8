"""Shadow replay (`noetl-stream replay-check`): where a new version of a playbook would route a
recorded execution differently. No I/O: the recorded log goes in, the differences come out.

The recorded events are applied, through the same rebuild `verify` uses (server/replay.py),
once with the version that ran and once with the new one. Each application's routing is what it
sent on: the commands (by step) and the step and execution events that say where tokens went
(`step.started`, `step.skipped`, `step.done`, `step.failed`, the end). The first event after
which the two differ is named with what each version did there; then the steps the recorded run
ran that the new version never runs, those it newly runs, and the templates (a guard,
an input) that fail under the new version and did not before. After a divergence the recorded
outcomes no longer match the new version's runs and are ignored by it, so everything after the
first difference is named as not reached rather than compared event by event.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from noetl_stream.dsl.models import Playbook
from noetl_stream.jsonutil import JsonObject
from noetl_stream.messages import Command
from noetl_stream.router import cause_of
from noetl_stream.router.state import ExecutionState, Outgoing
from noetl_stream.server.replay import Rebuilt, applied_events, rebuild
from noetl_stream.subjects import Topology

ROUTING_EVENTS = frozenset({"step.started", "step.skipped", "step.done", "step.failed",
                            "execution.completed", "execution.failed", "execution.cancelled"})


@dataclass
class ShadowReport:
    execution_id: str
    events: int  # recorded events applied
    differences: list[str] = field(default_factory=list)

    def as_json(self) -> JsonObject:
        return {"execution_id": self.execution_id, "events": self.events,
                "same": not self.differences, "differences": [*self.differences]}


def routing(outbox: list[Outgoing]) -> Counter[tuple[str, str]]:
    """What one application routed: (command | event type, step) pairs, counted."""
    found: Counter[tuple[str, str]] = Counter()
    for m in outbox:
        if isinstance(m.body, Command):
            found["command", m.body.step] += 1
        elif m.kind == "event" and m.event_type in ROUTING_EVENTS:
            found[m.event_type, str(m.plain_body.get("step") or "")] += 1
    return found


def shadow(recorded: Playbook, candidate: Playbook, events: list[JsonObject],
           topology: Topology, *, execution_id: str, playbook_key: str,
           parent_iter: JsonObject | None = None,
           versions: Mapping[str, Playbook] | None = None) -> ShadowReport:
    """Apply the recorded `events` to both versions and report where `candidate` differs."""
    before = rebuild(recorded, events, topology, playbook_key=playbook_key,
                     parent_iter=parent_iter, versions=versions)
    after = rebuild(candidate, events, topology, playbook_key=playbook_key,
                    parent_iter=parent_iter)
    applied = applied_events(events, topology)
    report = ShadowReport(execution_id, len(applied))
    if before is None or after is None:
        report.differences.append("its log holds no execution.started: nothing to replay")
        return report
    first = _first_divergence(before, after, applied)
    if first is not None:
        report.differences.append(first)
    report.differences.extend(_reach(before.state, after.state))
    report.differences.extend(_new_errors(before.state, after.state))
    return report


def _first_divergence(before: Rebuilt, after: Rebuilt,
                      applied: list[JsonObject]) -> str | None:
    for index, (old, new) in enumerate(zip(before.outboxes, after.outboxes, strict=False)):
        was, now = routing(old), routing(new)
        if was == now:
            continue
        where = "at the start" if index == 0 else \
            f"after {cause_of(applied[index - 1])} (recorded event {index})"
        return (f"routes differently {where}: the recorded run {_describe(was - now)}; "
                f"this version {_describe(now - was)}")
    return None


def _describe(routed: Counter[tuple[str, str]]) -> str:
    if not routed:
        return "does nothing more"
    parts = []
    for (kind, step), _ in sorted(routed.items()):
        verb = "sends a command to" if kind == "command" else kind
        parts.append(f'{verb} "{step}"' if step else verb)
    return ", ".join(parts)


def _reached(state: ExecutionState) -> set[str]:
    """Steps a token reached and ran (a step ruled out is marked skipped without running)."""
    return {name for name, rec in state.steps.items() if rec.runs}


def _reach(before: ExecutionState, after: ExecutionState) -> list[str]:
    lost = sorted(_reached(before) - _reached(after))
    gained = sorted(_reached(after) - _reached(before))
    out = []
    if lost:
        out.append("no longer reached: " + ", ".join(f'"{s}"' for s in lost))
    if gained:
        out.append("newly reached: " + ", ".join(f'"{s}"' for s in gained))
    return out


def _template_errors(state: ExecutionState) -> dict[str, str]:
    found = {name: str(rec.error.get("message")) for name, rec in state.steps.items()
             if rec.error and rec.error.get("kind") == "template"}
    if state.error and state.error.get("kind") == "template" and not found:
        found["(execution)"] = str(state.error.get("message"))
    return found


def _new_errors(before: ExecutionState, after: ExecutionState) -> list[str]:
    old = _template_errors(before)
    return [f'a template now errors at "{name}": {message}'
            for name, message in sorted(_template_errors(after).items()) if name not in old]
