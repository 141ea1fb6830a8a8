"""The router is pure (ARCHITECTURE §7): no module under router/ may import I/O, clocks or randomness."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import noetl_stream.router

FORBIDDEN = frozenset({"asyncio", "nats", "aiohttp", "time", "random"})
ROUTER_DIR = Path(noetl_stream.router.__file__).parent
MODULES = sorted(ROUTER_DIR.glob("*.py"))


def forbidden_imports(source: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found += [f"line {node.lineno}: {name}" for name in names if name.split(".")[0] in FORBIDDEN]
    return found


def test_router_package_has_modules_to_check() -> None:
    assert {p.name for p in MODULES} >= {"engine.py", "state.py", "graph.py", "context.py"}


@pytest.mark.parametrize("module", MODULES, ids=lambda p: p.name)
def test_router_module_imports_no_io_clock_or_randomness(module: Path) -> None:
    assert forbidden_imports(module.read_text()) == [], f"{module.name} must stay pure"


@pytest.mark.parametrize("source", [
    "import asyncio",
    "import time as t",
    "import os, random",
    "from nats.js import api",
    "from aiohttp import web",
    "def f():\n    import time\n",
])
def test_purity_check_catches_every_import_form(source: str) -> None:
    assert forbidden_imports(source) != []


def test_purity_check_allows_lookalike_names() -> None:
    assert forbidden_imports("import timeit_free\nfrom noetl_stream import ids\nfrom . import time") == []
