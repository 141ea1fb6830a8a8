"""The packages follow the processes, and imports flow one way between them (docs/architecture.md).

bus/ is what every process uses to talk to NATS; server/ and worker/ are what only that process
runs; the router and the DSL are pure and below all of them. Every import counts here, those
inside functions and under `if TYPE_CHECKING:` too: a late import still ties the packages.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import noetl_stream

ROOT = Path(noetl_stream.__file__).parent
PACKAGE = "noetl_stream"
PROCESSES = frozenset({"bus", "server", "worker", "api", "cli"})

# What each part may not import, directly or by a late import.
FORBIDDEN: dict[str, frozenset[str]] = {
    "bus": frozenset({"server", "worker", "api", "cli"}),
    "worker": frozenset({"server", "router", "api", "cli"}),
    "server": frozenset({"worker", "cli"}),
    "api": frozenset({"worker", "cli"}),
    "router": PROCESSES,
    "dsl": PROCESSES,
}
# Parts above the processes, which may import any of them: the CLI and the test fixtures start
# them, services.py wires a server and workers together, metrics_endpoint.py is served by either,
# schemas.py exports the documents of messages and of the API.
ABOVE = frozenset({"cli", "testing", "services", "metrics_endpoint", "schemas"})


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def part_of(module: str) -> str:
    """The subpackage (or top-level module) of `noetl_stream` that `module` belongs to."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def imported_modules(source: str, module: str, is_package: bool) -> set[str]:
    """Every `noetl_stream` module `source` imports; `from noetl_stream import server` names the
    subpackage it imports."""
    package = module if is_package else module.rsplit(".", 1)[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            found.add(base)
            if base == PACKAGE:
                found |= {f"{base}.{alias.name}" for alias in node.names}
    return {name for name in found if name.split(".")[0] == PACKAGE}


def violations(part: str, module: str, imports: set[str]) -> list[str]:
    if part in ABOVE:
        return []
    # Below the processes: no part other than the process packages may import one of them.
    forbidden = FORBIDDEN.get(part, PROCESSES if part not in PROCESSES else frozenset())
    return sorted(f"{module} imports {name}" for name in imports
                  if part_of(name) in forbidden and part_of(name) != part)


def layout_violations() -> list[str]:
    found: list[str] = []
    for path in sorted(ROOT.rglob("*.py")):
        module = module_name(path)
        imports = imported_modules(path.read_text(), module, path.name == "__init__.py")
        found += violations(part_of(module), module, imports)
    return found


def test_the_runtime_package_is_split_into_bus_server_and_worker() -> None:
    assert not (ROOT / "runtime").exists()
    for package, module in (("bus", "connection"), ("server", "server"), ("worker", "worker")):
        assert (ROOT / package / f"{module}.py").is_file(), (package, module)


def test_imports_flow_one_way_between_the_process_packages() -> None:
    assert layout_violations() == []


def test_the_scan_sees_every_process_package() -> None:
    parts = {part_of(module_name(p)) for p in ROOT.rglob("*.py")}
    assert parts >= set(FORBIDDEN) | ABOVE


@pytest.mark.parametrize(("module", "source"), [
    ("noetl_stream.bus.pull", "from noetl_stream.server.server import Server"),
    ("noetl_stream.bus.pull", "def f():\n    from noetl_stream import worker\n"),
    ("noetl_stream.bus.pull", "from ..api import app"),
    ("noetl_stream.bus.pull", "import noetl_stream.cli.main"),
    ("noetl_stream.worker.pipeline", "from noetl_stream.router.context import build_context"),
    ("noetl_stream.worker.pipeline", "from noetl_stream.server import retention"),
    ("noetl_stream.server.server", "from noetl_stream.worker.worker import Worker"),
    ("noetl_stream.router.engine", "from noetl_stream.bus.publish import publish_event"),
    ("noetl_stream.dsl.parser", "from noetl_stream.server import versions"),
    ("noetl_stream.api.app", "from noetl_stream.worker import pipeline"),
    ("noetl_stream.state.results", "from noetl_stream.bus.connection import Bus"),
    ("noetl_stream.config", "from noetl_stream import server"),
])
def test_the_check_catches_a_forbidden_import(module: str, source: str) -> None:
    imports = imported_modules(source, module, is_package=False)
    assert violations(part_of(module), module, imports) != []


@pytest.mark.parametrize(("module", "source"), [
    ("noetl_stream.worker.pipeline", "from noetl_stream.bus.publish import publish_event"),
    ("noetl_stream.server.server", "from noetl_stream.router import engine"),
    ("noetl_stream.api.app", "from noetl_stream.server import cancel\nfrom noetl_stream import bus"),
    ("noetl_stream.services", "from noetl_stream.worker.worker import Worker"),
    ("noetl_stream.cli.main", "from noetl_stream.server.server import Server"),
    ("noetl_stream.router.engine", "from noetl_stream.dsl.context import build_context"),
])
def test_the_check_allows_imports_along_the_layout(module: str, source: str) -> None:
    imports = imported_modules(source, module, is_package=False)
    assert violations(part_of(module), module, imports) == []
