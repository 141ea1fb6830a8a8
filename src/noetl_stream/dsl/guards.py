"""Which guards read a failure (the rule of docs/dialects.md "Failed steps and failed calls").

A failed step or call is passed on only by a guard written for failures. A guard qualifies when
its template reads the failure itself:

- the name `error` (the outcome's error mapping);
- an `error`, `status` or `status_code` field of the outcome's views (`output`, `outcome`,
  `this`, `result`, `response`, `event`, `_prev`, at any depth), e.g. `output.status == 'error'`
  or `response.status_code == 404`;
- a string constant naming a failure: `'step.failed'`, `'call.error'`, `'loop.failed'`,
  `'loop.iteration.failed'`, e.g. `event.name == 'step.failed'`.

Any other guard (`{{ workload.go }}`, `{{ event.name == 'call.done' }}`) may be true for
reasons that have nothing to do with the failure, so it never hands one on. Pure and cached.
"""

from __future__ import annotations

from functools import lru_cache

from jinja2 import TemplateSyntaxError, nodes

from noetl_stream.dsl.templating import parse_template

FAILURE_EVENTS = frozenset({"step.failed", "call.error", "loop.failed", "loop.iteration.failed"})
OUTCOME_VIEWS = frozenset({"output", "outcome", "this", "result", "response", "event", "_prev"})
FAILURE_FIELDS = frozenset({"error", "status", "status_code"})


def _root_and_fields(node: nodes.Node) -> tuple[str | None, list[str]]:
    """`a.b["c"].d` -> ("a", ["b", "c", "d"]); a chain not rooted in a name gives (None, ...)."""
    fields: list[str] = []
    while True:
        if isinstance(node, nodes.Getattr):
            fields.append(node.attr)
            node = node.node
        elif isinstance(node, nodes.Getitem):
            if isinstance(node.arg, nodes.Const) and isinstance(node.arg.value, str):
                fields.append(node.arg.value)
            node = node.node
        else:
            break
    return (node.name if isinstance(node, nodes.Name) else None), fields[::-1]


@lru_cache(maxsize=4096)
def reads_failure(when: str | None) -> bool:
    """True when the guard is written for failures (module docstring); False for `None`."""
    if when is None:
        return False
    try:
        ast = parse_template(when)
    except TemplateSyntaxError:
        return False
    if any(n.name == "error" for n in ast.find_all(nodes.Name)):
        return True
    if any(isinstance(c.value, str) and c.value in FAILURE_EVENTS for c in ast.find_all(nodes.Const)):
        return True
    for chain in ast.find_all((nodes.Getattr, nodes.Getitem)):
        root, fields = _root_and_fields(chain)
        if root in OUTCOME_VIEWS and FAILURE_FIELDS.intersection(fields):
            return True
    return False
