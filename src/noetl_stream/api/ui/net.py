"""A playbook drawn as its net: steps as nodes, arcs as edges with their guards, joins marked,
each placed by `layout.py`. Pure: the same playbook always gives the same drawing.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from noetl_stream.api.ui.layout import NODE_H, NODE_W, layered_layout
from noetl_stream.dsl.models import Playbook, Step
from noetl_stream.router.graph import graph_of

IMPLICIT_END = "end"  # an arc to a missing step named `end` ends its branch (docs/architecture.md)


class _Out(BaseModel):
    model_config = ConfigDict(frozen=True)


class NetNode(_Out):
    name: str
    kinds: list[str] = Field(description="Tool kinds of the step's tasks, in order")
    loop: str | None = Field(description="Loop mode (sequential, parallel, cursor), if a loop step")
    listener: bool = Field(description="eval_mode on_event: waits for signals or timers")
    join: bool = Field(description="More than one forward arc comes in: it waits for its branches")
    start: bool
    implicit: bool = Field(False, description="The implicit `end` some arcs name")
    desc: str | None = None
    x: float
    y: float
    w: float = NODE_W
    h: float = NODE_H


class NetEdge(_Out):
    source: str
    target: str
    when: str | None = Field(description="The guard; none fires on success")
    mode: str = Field(description="The source's next mode: exclusive (first true arc) or inclusive")
    back: bool = Field(description="Re-enters an earlier step (a loop back), never through a join")
    route: str | None = None
    delay: float | None = None
    points: list[tuple[float, float]] = Field(description="The route to draw, source to target; "
                                              "empty for an arc back to its own step")


class NetView(_Out):
    playbook: str
    path: str | None
    version: str | None
    nodes: list[NetNode]
    edges: list[NetEdge]
    width: float
    height: float


def _node(step: Step, *, start: bool, join: bool, x: float, y: float) -> NetNode:
    return NetNode(name=step.name, kinds=[t.kind for t in step.tasks],
                   loop=step.loop.mode if step.loop is not None else None,
                   listener=step.eval_mode == "on_event", join=join, start=start, desc=step.desc,
                   x=x, y=y)


def net_of(playbook: Playbook) -> NetView:
    graph = graph_of(playbook)
    names = [s.name for s in playbook.steps]
    arcs = [(step, arc) for step in playbook.steps for arc in step.next.arcs
            if arc.step in names or arc.step == IMPLICIT_END]
    ends_implicitly = any(arc.step not in names for _, arc in arcs)
    nodes = names + ([IMPLICIT_END] if ends_implicitly else [])
    pairs = [(step.name, arc.step) for step, arc in arcs]
    layout = layered_layout(nodes, pairs, graph.back_edges)
    start = playbook.start_step.name
    out_nodes = [_node(step, start=step.name == start, join=graph.is_join(step.name),
                       x=layout.nodes[step.name].x, y=layout.nodes[step.name].y)
                 for step in playbook.steps]
    if ends_implicitly:
        where = layout.nodes[IMPLICIT_END]
        out_nodes.append(NetNode(name=IMPLICIT_END, kinds=[], loop=None, listener=False,
                                 join=False, start=False, implicit=True, x=where.x, y=where.y))
    edges = [NetEdge(source=step.name, target=arc.step, when=arc.when, mode=step.next.mode,
                     back=graph.is_back_edge(step.name, arc.step) or step.name == arc.step,
                     route=arc.route, delay=arc.delay, points=route)
             for (step, arc), route in zip(arcs, layout.routes, strict=True)]
    return NetView(playbook=playbook.name, path=playbook.path, version=playbook.version,
                   nodes=out_nodes, edges=edges, width=layout.width, height=layout.height)
