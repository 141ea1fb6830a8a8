"""The router is pure (ARCHITECTURE §7): no module under router/ may import I/O, clocks or randomness."""

from __future__ import annotations

import ast
import subprocess
import sys
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
    assert {p.name for p in MODULES} >= {"engine.py", "state.py", "graph.py", "reads.py"}


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


# -- the modules the router reaches, and what its templates can do ---------------------------

PACKAGE_ROOT = ROUTER_DIR.parent
# Beyond the direct list: anything else that reads a clock, the OS or chance.
TRANSITIVELY_FORBIDDEN = FORBIDDEN | {"os", "uuid", "secrets", "datetime", "socket",
                                      "subprocess", "threading"}


def _module_file(name: str) -> Path | None:
    base = PACKAGE_ROOT.joinpath(*name.split(".")[1:])
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imported_names(path: Path, module: str) -> list[tuple[str, int]]:
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    found: list[tuple[str, int]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package
                for _ in range(node.level - 1):
                    anchor = anchor.rsplit(".", 1)[0]
                base = f"{anchor}.{node.module}" if node.module else anchor
            found.append((base, node.lineno))
            found += [(f"{base}.{alias.name}", node.lineno) for alias in node.names]
    return found


def router_closure() -> dict[str, list[str]]:
    """Every noetl_stream module the router imports, directly or not, with the outside modules
    each one imports."""
    todo = [f"noetl_stream.router.{p.stem}" for p in MODULES]
    outside: dict[str, list[str]] = {}
    while todo:
        module = todo.pop()
        path = _module_file(module)
        if module in outside or path is None:
            continue
        outside[module] = []
        for name, line in _imported_names(path, module):
            if name.split(".")[0] == "noetl_stream":
                todo.append(name)
            else:
                outside[module].append(f"line {line}: {name}")
    return outside


def test_router_closure_reaches_the_template_renderer() -> None:
    assert {"noetl_stream.dsl.templating", "noetl_stream.jsonutil"} <= set(router_closure())


def test_no_module_the_router_imports_reads_io_clocks_or_chance() -> None:
    offending = {module: [i for i in imports if i.split(": ")[1].split(".")[0]
                          in TRANSITIVELY_FORBIDDEN]
                 for module, imports in router_closure().items()}
    assert {m: i for m, i in offending.items() if i} == {}


@pytest.mark.parametrize("template", [
    "{{ range(100) | random }}",
    "{{ lipsum() }}",
    "{{ ctx.update({'x': 1}) }}",
    "{{ ctx.pop('a') }}",
    "{{ ctx.items_list.append(3) }}",
    "{% set _ = ctx.setdefault('y', 1) %}",
])
def test_router_templates_neither_draw_chance_nor_change_state(template: str) -> None:
    from noetl_stream.dsl.templating import render_string
    from noetl_stream.errors import TemplateError

    ctx = {"a": 1, "items_list": [1, 2]}
    with pytest.raises(TemplateError):
        render_string(template, {"ctx": ctx}, step="s", field="f")
    assert ctx == {"a": 1, "items_list": [1, 2]}


_OUTBOX_SCRIPT = """
import orjson
from noetl_stream.dsl import parse_playbook
from noetl_stream.testing import Reply, RouterHarness
text = '''apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: order, path: order}
workload: {w1: 1, w2: 2, w3: 3, w4: 4}
workflow:
  - step: start
    next: [{step: alpha}, {step: beta}, {step: gamma}, {step: delta}]
  - {step: alpha, next: join}
  - {step: beta, next: join}
  - {step: gamma, next: join}
  - {step: delta, next: join}
  - step: join
    tool:
      kind: python
      input: {a: "{{ alpha }}", b: "{{ beta }}", g: "{{ gamma }}", d: "{{ delta }}",
              w: "{{ w1 }}{{ w2 }}{{ w3 }}{{ w4 }}"}
      code: "result = 1"
'''
harness = RouterHarness(parse_playbook(text, "order.yaml").playbook)
seen = []
harness.run(lambda c: seen.append(c) or Reply(result={"from": c["step"]}))
print(orjson.dumps(seen).decode())
"""


def _outbox_under_hash_seeds(seeds: tuple[str, ...]) -> set[str]:
    """The outbox script's output under each seed, from Pythons started side by side. They import
    the tree under test (not whatever noetl_stream the interpreter has installed) and write no
    bytecode into it."""
    env = {"PYTHONPATH": str(PACKAGE_ROOT.parent), "PYTHONDONTWRITEBYTECODE": "1"}
    script = f"import noetl_stream; print(noetl_stream.__file__)\n{_OUTBOX_SCRIPT}"
    procs = [subprocess.Popen([sys.executable, "-B", "-c", script], text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env={**env, "PYTHONHASHSEED": seed})
             for seed in seeds]
    outputs = set()
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        imported, commands = out.split("\n", 1)
        assert Path(imported) == PACKAGE_ROOT / "__init__.py"
        outputs.add(commands)
    return outputs


@pytest.mark.slow
def test_commands_are_the_same_bytes_under_any_hash_seed() -> None:
    outputs = _outbox_under_hash_seeds(("1", "2", "3", "4"))
    assert len(outputs) == 1 and "join" in next(iter(outputs))
