"""Static checks of a playbook's net: what never runs, or does not run when it seems to. Pure.

- a step no arc path from the start step reaches never runs (tokens move only along arcs);
- a join (a step with more than one forward predecessor, dsl/net.py) waits until each of them
  has either sent its token or been ruled out; a predecessor the start never reaches does
  neither, so the join runs only when nothing else in the execution runs (the router then stops
  waiting: router/engine.py, check_quiescence), not when its other inputs arrive;
- a template that reads a step's result by name, where that step cannot have run before: every
  path from the start reaches it only through the reading step, and it leads back there in no
  cycle. The read renders nothing.
Each finding is a warning, an error under --strict: guards the checker cannot see (a branch
never taken in practice) may make such a net acceptable to its author.
"""

from __future__ import annotations

from collections.abc import Iterator

from noetl_stream.dsl import checks, net
from noetl_stream.dsl.models import Playbook
from noetl_stream.errors import Issue


def net_issues(playbook: Playbook, *, strict: bool) -> list[Issue]:
    severity = "error" if strict else "warning"
    return [Issue(playbook.file, line, message, step, fld, severity)
            for step, line, fld, message in _findings(playbook)]


def _findings(playbook: Playbook) -> Iterator[tuple[str, int | None, str, str]]:
    shape = net.shape_of(playbook)
    live = net.reached(shape.succ, [shape.start])
    for step in playbook.steps:
        if step.name not in live:
            yield (step.name, step.line, "step",
                   f'no path from the start step "{shape.start}" reaches this step: it never runs')
    for step in playbook.steps:
        dead = [p for p in shape.forward_preds[step.name] if p not in live]
        if step.name in live and dead:
            shown = ", ".join(f'"{p}"' for p in dead)
            yield (step.name, step.line, "step",
                   f"this join also waits for {shown}, which no path from the start step "
                   "reaches: it runs only once nothing else in the execution runs, not when its "
                   "other inputs arrive")
    yield from _reads_out_of_order(playbook, shape, live)


def _reads_out_of_order(playbook: Playbook, shape: net.NetShape,
                        live: set[str]) -> Iterator[tuple[str, int | None, str, str]]:
    """A step can have finished when another runs unless every path from the start to it passes
    the reader (it runs only after) and it leads back to the reader in no cycle.
    """
    dominators = net.dominators(shape.start, shape.succ)
    component = net.components([shape.start, *shape.succ], shape.succ)
    for step, fld, line, name in checks.step_reads(playbook):
        if step not in live or name not in live:
            continue  # an unreachable step is reported once, above
        if dominators.dominates(step, name) and component[step] != component[name]:
            yield (step, line, fld,
                   f'reads step "{name}", which cannot have run before this step: every path '
                   f'from the start step reaches "{name}" only through "{step}"')
