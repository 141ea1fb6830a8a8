"""NoETL's implicit `end`: a step written without `next:` hands its token to the step named
`end`, when the playbook has one (docs/dialects.md "Steps without `next`").

NoETL's engines treat `end` as the place every path converges to, so playbooks leave `next:` out
of their last working steps and still expect `end` to run. Playbooks without an `end` step are
unchanged: there a step without `next:` ends its branch. Pure.
"""

from __future__ import annotations

from collections.abc import Iterable

from noetl_stream.dsl.models import Arc, NextSpec, Step

END = "end"


def route_leaves_to_end(steps: list[Step], without_next: Iterable[str]) -> list[Step]:
    """`steps` with an unguarded arc to `end` on each step named in `without_next` (the steps
    whose YAML has no `next:` key), when a step `end` exists; `end` itself gets none.
    """
    if not any(step.name == END for step in steps):
        return steps
    leaves = set(without_next) - {END}
    # Arcs from a case `then.next` carry a route; the structural `next` is what is missing.
    return [step.model_copy(update={"next": NextSpec(
        mode=step.next.mode, arcs=(*step.next.arcs, Arc(step=END, line=step.line)))})
            if step.name in leaves and not any(a.route is None for a in step.next.arcs) else step
            for step in steps]
