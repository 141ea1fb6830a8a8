"""The structure of a playbook's net that both the router and `validate` read: successors,
back-edges, forward predecessors (a step with more than one is a join) and what the start step
reaches. Pure.

An arc is a back-edge when, in a depth-first walk from the start step, it points at a step still
on the walk's stack (pagination loops, retry loops). Back-edges re-enter a step without a join.
Tokens move only along arcs, from the start step on (router/engine.py), so what no arc path from
the start reaches never runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from noetl_stream.dsl.models import Playbook


@dataclass(frozen=True)
class NetShape:
    start: str
    succ: dict[str, list[str]]  # each step's arc targets that are steps (`end` may not be one)
    back_edges: frozenset[tuple[str, str]]
    forward_preds: dict[str, tuple[str, ...]]


def shape_of(playbook: Playbook) -> NetShape:
    names = {s.name for s in playbook.steps}
    succ = {s.name: [a.step for a in s.next.arcs if a.step in names] for s in playbook.steps}
    start = playbook.start_step.name
    back = _back_edges([start] + [s.name for s in playbook.steps], succ)
    preds: dict[str, list[str]] = {n: [] for n in sorted(names)}
    for src, targets in succ.items():
        for dst in targets:
            if (src, dst) not in back and src not in preds[dst]:
                preds[dst].append(src)
    return NetShape(start, succ, frozenset(back), {k: tuple(v) for k, v in preds.items()})


def _back_edges(roots: Sequence[str], succ: Mapping[str, list[str]]) -> set[tuple[str, str]]:
    back: set[tuple[str, str]] = set()
    state: dict[str, int] = {}  # 1 on stack, 2 done
    # Iterative DFS so a long chain of steps cannot exhaust Python's recursion limit.
    for root in roots:
        if root in state:
            continue
        stack: list[tuple[str, int]] = [(root, 0)]
        state[root] = 1
        while stack:
            node, idx = stack[-1]
            targets = succ[node]
            if idx < len(targets):
                stack[-1] = (node, idx + 1)
                nxt = targets[idx]
                if state.get(nxt) == 1:
                    back.add((node, nxt))
                elif nxt not in state:
                    state[nxt] = 1
                    stack.append((nxt, 0))
            else:
                state[node] = 2
                stack.pop()
    return back


def reached(succ: Mapping[str, list[str]], roots: Sequence[str],
            without: str | None = None) -> set[str]:
    """The steps an arc path from `roots` reaches (the roots included), never passing `without`."""
    seen = {r for r in roots if r != without}
    todo = list(seen)
    while todo:
        for nxt in succ.get(todo.pop(), ()):
            if nxt not in seen and nxt != without:
                seen.add(nxt)
                todo.append(nxt)
    return seen
