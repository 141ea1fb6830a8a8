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


def components(order: Sequence[str], succ: Mapping[str, list[str]]) -> dict[str, int]:
    """Strongly connected components (Kosaraju, iterative), numbered in a deterministic order:
    steps in one component can run each other again.
    """
    finished: list[str] = []
    seen: set[str] = set()
    for root in order:
        if root in seen:
            continue
        seen.add(root)
        stack = [(root, iter(succ[root]))]
        while stack:
            node, unvisited = stack[-1]
            nxt = next((t for t in unvisited if t not in seen), None)
            if nxt is None:
                stack.pop()
                finished.append(node)
            else:
                seen.add(nxt)
                stack.append((nxt, iter(succ[nxt])))
    preds: dict[str, list[str]] = {n: [] for n in order}
    for src, targets in succ.items():
        for dst in targets:
            preds[dst].append(src)
    component: dict[str, int] = {}
    for number, root in enumerate(reversed(finished)):
        if root in component:
            continue
        component[root] = number
        todo = [root]
        while todo:
            for pred in preds[todo.pop()]:
                if pred not in component:
                    component[pred] = number
                    todo.append(pred)
    return component


@dataclass(frozen=True)
class Dominators:
    """Which steps every path from the start passes (Cooper, Harvey and Kennedy's iterative
    algorithm over the steps the start reaches), answered in constant time per pair.
    """

    enter: dict[str, int]
    leave: dict[str, int]

    def dominates(self, a: str, b: str) -> bool:
        """Every path from the start to `b` passes `a` (a step dominates itself)."""
        if a not in self.enter or b not in self.enter:
            return False
        return self.enter[a] <= self.enter[b] and self.leave[b] <= self.leave[a]


def dominators(start: str, succ: Mapping[str, list[str]]) -> Dominators:
    order = _postorder(start, succ)[::-1]  # reverse postorder: the start first
    rank = {n: i for i, n in enumerate(order)}
    preds: dict[str, list[str]] = {n: [] for n in order}
    for src in order:
        for dst in succ.get(src, ()):
            preds[dst].append(src)
    idom: dict[str, str] = {start: start}
    changed = True
    while changed:
        changed = False
        for node in order[1:]:
            done = [p for p in preds[node] if p in idom]
            new = done[0]
            for p in done[1:]:
                new = _meet(p, new, idom, rank)
            if idom.get(node) != new:
                idom[node] = new
                changed = True
    children: dict[str, list[str]] = {n: [] for n in order}
    for node in order[1:]:
        children[idom[node]].append(node)
    enter: dict[str, int] = {}
    leave: dict[str, int] = {}
    clock = 0
    stack: list[tuple[str, bool]] = [(start, False)]
    while stack:
        node, closing = stack.pop()
        clock += 1
        if closing:
            leave[node] = clock
            continue
        enter[node] = clock
        stack.append((node, True))
        stack.extend((c, False) for c in reversed(children[node]))
    return Dominators(enter, leave)


def _meet(a: str, b: str, idom: Mapping[str, str], rank: Mapping[str, int]) -> str:
    while a != b:
        while rank[a] > rank[b]:
            a = idom[a]
        while rank[b] > rank[a]:
            b = idom[b]
    return a


def _postorder(start: str, succ: Mapping[str, list[str]]) -> list[str]:
    out: list[str] = []
    seen = {start}
    stack = [(start, iter(succ.get(start, ())))]
    while stack:
        node, unvisited = stack[-1]
        nxt = next((t for t in unvisited if t not in seen), None)
        if nxt is None:
            stack.pop()
            out.append(node)
        else:
            seen.add(nxt)
            stack.append((nxt, iter(succ.get(nxt, ()))))
    return out
