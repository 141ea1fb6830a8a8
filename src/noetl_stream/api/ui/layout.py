"""A layered (Sugiyama-style) drawing of a directed graph, left to right. Pure.

1. Back-edges are turned around, so the graph is acyclic (`router/graph.py` finds them).
2. Each node's layer is its longest path from a source, so every arc points one or more layers
   to the right.
3. An arc spanning several layers gets a virtual node in each layer it crosses; its route bends
   through them.
4. Nodes are ordered within their layers by the barycenter of their neighbours, sweeping right
   and left a few times and keeping the order with the fewest crossings.
5. Layers become columns, positions in a layer become rows, each column centred.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise

NODE_W = 168.0
NODE_H = 56.0
LAYER_GAP = 150.0  # horizontal space between columns, where arcs and their guards go
ROW_GAP = 36.0
MARGIN = 24.0
SWEEPS = 8


@dataclass(frozen=True)
class Placed:
    x: float
    y: float
    layer: int


@dataclass
class Layout:
    nodes: dict[str, Placed]
    routes: list[list[tuple[float, float]]]  # one per input edge, from source to target
    width: float
    height: float
    layers: list[list[str]] = field(default_factory=list)  # real and virtual names, in order


def longest_path_layers(nodes: Sequence[str], edges: Sequence[tuple[str, str]]) -> dict[str, int]:
    """Layer of each node of an acyclic graph: 0 for sources, else 1 + the deepest predecessor."""
    preds: dict[str, list[str]] = {n: [] for n in nodes}
    succs: dict[str, list[str]] = {n: [] for n in nodes}
    for src, dst in edges:
        preds[dst].append(src)
        succs[src].append(dst)
    remaining = {n: len(preds[n]) for n in nodes}
    ready = [n for n in nodes if remaining[n] == 0]
    layer = dict.fromkeys(ready, 0)
    while ready:
        node = ready.pop(0)
        for nxt in succs[node]:
            layer[nxt] = max(layer.get(nxt, 0), layer[node] + 1)
            remaining[nxt] -= 1
            if remaining[nxt] == 0:
                ready.append(nxt)
    if len(layer) != len(nodes):
        raise ValueError("the graph has a cycle left after turning its back-edges around")
    return layer


def crossings(order: list[list[str]], adjacency: dict[str, list[str]]) -> int:
    """Arc crossings between consecutive layers, counting pairs of arcs whose ends swap order."""
    total = 0
    for left, right in pairwise(order):
        position = {n: i for i, n in enumerate(right)}
        ends = [(i, position[t]) for i, n in enumerate(left) for t in adjacency.get(n, ())
                if t in position]
        for a, (a_src, a_dst) in enumerate(ends):
            for b_src, b_dst in ends[a + 1:]:
                if (a_src - b_src) * (a_dst - b_dst) < 0:
                    total += 1
    return total


def _barycenter_pass(order: list[list[str]], neighbours: dict[str, list[str]],
                     layers: range) -> None:
    for index in layers:
        fixed = {n: i for i, n in enumerate(order[index - 1 if layers.step > 0 else index + 1])}
        current = order[index]

        def weight(node: str, place: int, fixed: dict[str, int] = fixed) -> float:
            near = [fixed[n] for n in neighbours.get(node, ()) if n in fixed]
            return sum(near) / len(near) if near else float(place)

        keyed = sorted(enumerate(current), key=lambda item: (weight(item[1], item[0]), item[0]))
        order[index] = [node for _, node in keyed]


def _order(order: list[list[str]], down: dict[str, list[str]], up: dict[str, list[str]]) -> None:
    best = [list(layer) for layer in order]
    best_crossings = crossings(order, down)
    for sweep in range(SWEEPS):
        if sweep % 2 == 0:
            _barycenter_pass(order, up, range(1, len(order)))
        else:
            _barycenter_pass(order, down, range(len(order) - 2, -1, -1))
        count = crossings(order, down)
        if count < best_crossings:
            best, best_crossings = [list(layer) for layer in order], count
    order[:] = best


def layered_layout(nodes: Sequence[str], edges: Sequence[tuple[str, str]],
                   back_edges: frozenset[tuple[str, str]] = frozenset()) -> Layout:
    """Positions of `nodes` and a route for each of `edges` (self-loops get an empty route)."""
    dag: list[tuple[str, str]] = []
    for src, dst in edges:
        if src == dst:
            continue
        arc = (dst, src) if (src, dst) in back_edges else (src, dst)
        if arc not in dag:
            dag.append(arc)
    layer = longest_path_layers(nodes, dag)
    depth = max(layer.values(), default=0) + 1
    order: list[list[str]] = [[] for _ in range(depth)]
    for node in nodes:
        order[layer[node]].append(node)
    down: dict[str, list[str]] = {}
    up: dict[str, list[str]] = {}
    chains: dict[tuple[str, str], list[str]] = {}
    for src, dst in dag:
        chain = [src]
        for step in range(layer[src] + 1, layer[dst]):
            virtual = f"\x00{src}\x00{dst}\x00{step}"
            order[step].append(virtual)
            chain.append(virtual)
        chain.append(dst)
        for a, b in pairwise(chain):
            down.setdefault(a, []).append(b)
            up.setdefault(b, []).append(a)
        chains[(src, dst)] = chain
    _order(order, down, up)
    return _place(order, edges, chains, back_edges)


def _place(order: list[list[str]], edges: Sequence[tuple[str, str]],
           chains: dict[tuple[str, str], list[str]],
           back_edges: frozenset[tuple[str, str]]) -> Layout:
    tallest = max((len(layer) for layer in order), default=1)
    height = 2 * MARGIN + tallest * NODE_H + (tallest - 1) * ROW_GAP
    centre: dict[str, tuple[float, float]] = {}
    placed: dict[str, Placed] = {}
    for index, layer in enumerate(order):
        span = len(layer) * NODE_H + (len(layer) - 1) * ROW_GAP
        top = (height - span) / 2
        x = MARGIN + index * (NODE_W + LAYER_GAP)
        for row, node in enumerate(layer):
            y = top + row * (NODE_H + ROW_GAP)
            centre[node] = (x + NODE_W / 2, y + NODE_H / 2)
            if not node.startswith("\x00"):
                placed[node] = Placed(x=x, y=y, layer=index)
    routes: list[list[tuple[float, float]]] = []
    for src, dst in edges:
        if src == dst:
            routes.append([])
            continue
        back = (src, dst) in back_edges
        chain = chains[(dst, src) if back else (src, dst)]
        points = [centre[n] for n in (reversed(chain) if back else chain)]
        routes.append(_attach(points, back))
    width = 2 * MARGIN + len(order) * NODE_W + max(len(order) - 1, 0) * LAYER_GAP
    return Layout(nodes=placed, routes=routes, width=width, height=height, layers=order)


def _attach(points: list[tuple[float, float]], back: bool) -> list[tuple[float, float]]:
    """Move the route's ends from node centres to the sides the arc leaves and enters by:
    right to left for a forward arc; a back-edge leaves and enters by the bottom.
    """
    (sx, sy), (tx, ty) = points[0], points[-1]
    if back:
        first, last = (sx, sy + NODE_H / 2), (tx, ty + NODE_H / 2)
    else:
        first, last = (sx + NODE_W / 2, sy), (tx - NODE_W / 2, ty)
    return [first, *points[1:-1], last]
