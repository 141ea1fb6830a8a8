"""The UI's net drawing: layers by longest path, crossings reduced, arcs routed, and a playbook's
steps, guards, joins and back-edges as the net route answers them."""

from __future__ import annotations

from noetl_stream.api.ui.layout import NODE_W, crossings, layered_layout, longest_path_layers
from noetl_stream.api.ui.net import net_of
from noetl_stream.dsl import parse_playbook
from playbook_files import read_playbook


def test_a_node_sits_one_layer_right_of_its_deepest_predecessor() -> None:
    layers = longest_path_layers(["s", "a", "b", "c", "j"],
                                 [("s", "a"), ("a", "b"), ("b", "c"), ("s", "j"), ("c", "j")])
    assert layers == {"s": 0, "a": 1, "b": 2, "c": 3, "j": 4}


def test_swapped_arcs_are_untangled() -> None:
    nodes = ["a", "b", "c", "d"]
    edges = [("a", "d"), ("b", "c")]
    assert crossings([["a", "b"], ["c", "d"]], {"a": ["d"], "b": ["c"]}) == 1
    layout = layered_layout(nodes, edges)
    assert layout.layers[1] == ["d", "c"]
    assert layout.nodes["d"].y < layout.nodes["c"].y


def test_a_long_arc_bends_through_the_layers_it_crosses() -> None:
    layout = layered_layout(["s", "a", "b", "t"], [("s", "a"), ("a", "b"), ("b", "t"), ("s", "t")])
    long_route = layout.routes[3]
    assert len(long_route) == 4  # leaves s, bends in the 2 layers between, enters t
    xs = [x for x, _ in long_route]
    assert xs == sorted(xs)
    assert long_route[0][0] == layout.nodes["s"].x + NODE_W
    assert long_route[-1][0] == layout.nodes["t"].x


def test_back_edges_point_left_and_self_loops_get_no_route() -> None:
    layout = layered_layout(["a", "b", "c"], [("a", "b"), ("b", "c"), ("c", "a"), ("b", "b")],
                            frozenset({("c", "a")}))
    assert [layout.nodes[n].layer for n in "abc"] == [0, 1, 2]
    back = layout.routes[2]
    assert back[0][0] > back[-1][0]
    assert layout.routes[3] == []


PLAYBOOK = read_playbook("unit", "ui_net.yaml")


def test_the_net_of_a_playbook_has_its_steps_guards_joins_and_loops() -> None:
    net = net_of(parse_playbook(PLAYBOOK, "shapes.yaml").playbook)
    nodes = {n.name: n for n in net.nodes}
    assert set(nodes) == {"start", "fetch", "side", "join", "end"}
    assert nodes["join"].join and not nodes["fetch"].join
    assert nodes["side"].loop == "sequential" and nodes["side"].kinds == ["python"]
    assert nodes["start"].start and nodes["end"].implicit
    edges = {(e.source, e.target): e for e in net.edges}
    assert edges[("fetch", "fetch")].back and edges[("fetch", "fetch")].points == []
    assert edges[("side", "join")].when == "{{ side | length > 1 }}"
    assert edges[("start", "fetch")].mode == "inclusive"
    assert nodes["join"].x > nodes["fetch"].x > nodes["start"].x
    assert net_of(parse_playbook(PLAYBOOK, "shapes.yaml").playbook) == net  # deterministic
