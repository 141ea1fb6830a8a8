"""The router's modules stay small and acyclic: the rule modules see the engine only through
router/interface.py, and no module imports one that imports it back.
"""

from __future__ import annotations

import ast
from pathlib import Path

import noetl_stream.router

ROUTER_DIR = Path(noetl_stream.router.__file__).parent
MAX_LINES = 600


def router_imports(path: Path) -> set[str]:
    """The router modules `path` imports, TYPE_CHECKING blocks included."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and \
                node.module.startswith("noetl_stream.router"):
            parts = node.module.split(".")
            out |= {parts[2]} if len(parts) > 2 else {alias.name for alias in node.names}
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    found = []

    def walk(path: list[str]) -> None:
        for nxt in sorted(graph.get(path[-1], ())):
            if nxt == path[0]:
                found.append([*path, nxt])
            elif nxt not in path and nxt > path[0]:  # each cycle once, from its smallest module
                walk([*path, nxt])

    for start in sorted(graph):
        walk([start])
    return found


def test_router_modules_import_no_cycle() -> None:
    graph = {p.stem: router_imports(p) for p in ROUTER_DIR.glob("*.py") if p.stem != "__init__"}
    assert "engine" in graph and graph["loops"] >= {"interface"}
    assert cycles(graph) == []


def test_rule_modules_do_not_import_the_engine() -> None:
    for name in ("cancel", "case_events", "children", "listeners", "loops", "watchdog"):
        assert "engine" not in router_imports(ROUTER_DIR / f"{name}.py"), name


def test_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"a"}}) == [["a", "b", "a"]]


def test_router_modules_stay_under_the_size_limit() -> None:
    sizes = {p.name: len(p.read_text().splitlines()) for p in ROUTER_DIR.glob("*.py")}
    assert {name: n for name, n in sizes.items() if n > MAX_LINES} == {}
