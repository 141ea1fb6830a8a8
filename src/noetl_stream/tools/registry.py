"""Tool kinds by name: the built-ins plus any registered under the `noetl_stream.tools` entry point.

A plugin's entry point names a factory called with the worker's `ToolServices`; it returns an
object with `kind`, `async run(call) -> Outcome` and `async close()`.
"""

from __future__ import annotations

import functools
import importlib
import sys
from collections.abc import Callable
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from noetl_stream.dsl.kinds import RUNNABLE_KINDS
from noetl_stream.errors import ToolError
from noetl_stream.tools.base import Tool, ToolServices
from noetl_stream.tools.extras import DUCKDB_INSTALL, duckdb_installed
from noetl_stream.tools.python import PythonTool
from noetl_stream.tools.python_starting import StartingPython

ENTRY_POINT_GROUP = "noetl_stream.tools"

# kind -> "module:Class"; each class (or factory) is built as Class(services).
BUILTIN_TOOLS: dict[str, str] = {
    "noop": "noetl_stream.tools.noop:NoopTool",
    "http": "noetl_stream.tools.http:HttpTool",
    "postgres": "noetl_stream.tools.postgres:PostgresTool",
    "duckdb": "noetl_stream.tools.extras:duckdb_tool",  # DuckDB is the optional extra [duckdb]
    "secrets": "noetl_stream.tools.secrets:SecretsTool",
    "shell": "noetl_stream.tools.shell:ShellTool",
    "nats": "noetl_stream.tools.nats:NatsTool",
    "playbook": "noetl_stream.tools.playbook:PlaybookTool",
    "transfer": "noetl_stream.tools.transfer:TransferTool",
}


def _load(spec: str) -> Any:
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def _build(spec: str, services: ToolServices) -> Tool:
    tool: Tool = _load(spec)(services)
    return tool


def plugin_entry_points() -> tuple[EntryPoint, ...]:
    """The tool plugins installed here, found once per set of import paths: the search reads
    every installed package's metadata, too slow to repeat on the event loop for each signal.
    """
    return _plugins_on(tuple(sys.path))


@functools.lru_cache(maxsize=8)
def _plugins_on(import_paths: tuple[str, ...]) -> tuple[EntryPoint, ...]:
    return tuple(entry_points(group=ENTRY_POINT_GROUP))


def tool_origins() -> dict[str, str]:
    """Every kind a worker here would run, with where it comes from; loads no plugin code.

    A plugin registered under a built-in's name replaces it, as it does in `ToolRegistry.create`.
    """
    origins = {"python": "built-in", "workbook": "built-in"}
    origins.update(dict.fromkeys(BUILTIN_TOOLS, "built-in"))
    if not duckdb_installed():
        origins["duckdb"] = f"built-in, not installed ({DUCKDB_INSTALL})"
    for ep in plugin_entry_points():
        origins[ep.name] = f"plugin {ep.value}"
    return dict(sorted(origins.items()))


def installed_kinds() -> frozenset[str]:
    """The kinds playbooks may use here: built-ins plus installed plugins (for the DSL validator)."""
    return RUNNABLE_KINDS | frozenset(tool_origins())


class ToolRegistry:
    """The worker's tools. Built-ins other than python are built when a step of their kind first
    runs, so a worker imports only the libraries its steps use (DuckDB alone is about 45 MB of
    resident memory; bench/README.md "Memory").
    """

    def __init__(self, tools: dict[str, Tool], origins: dict[str, str] | None = None,
                 deferred: dict[str, Callable[[], Tool]] | None = None) -> None:
        self._tools = tools
        self._deferred = dict(deferred or {})
        self.origins = origins or {}

    @classmethod
    async def create(cls, *, services: ToolServices | None = None, python_children: int = 8,
                     python_warm: int | None = None, quiet_python_fallback: bool = False,
                     python_idle_s: float | None = None,
                     python_in_background: bool = False) -> ToolRegistry:
        """`python_in_background`: the python tool starts while the caller goes on, and its
        calls wait for that (tools/python_starting.py); else before this returns.
        """
        services = services or ToolServices()
        python = PythonTool(max_children=python_children, warm=python_warm,
                            quiet_fallback=quiet_python_fallback, idle_s=python_idle_s)
        tools: dict[str, Tool] = {"python": python}
        if python_in_background:
            tools["python"] = StartingPython(python)
        else:
            await python.start()
        origins = {"python": "built-in"}
        deferred: dict[str, Callable[[], Tool]] = {}
        for kind, spec in BUILTIN_TOOLS.items():
            deferred[kind] = functools.partial(_build, spec, services)
            origins[kind] = "built-in"
        for ep in plugin_entry_points():
            factory: Any = ep.load()
            tools[ep.name] = factory(services)
            deferred.pop(ep.name, None)  # a plugin of a built-in's name replaces it
            origins[ep.name] = f"plugin {ep.value}"
        return cls(tools, origins, deferred)

    @property
    def kinds(self) -> list[str]:
        return sorted({*self._tools, *self._deferred})

    def get(self, kind: str) -> Tool:
        tool = self._tools.get(kind)
        if tool is not None:
            return tool
        build = self._deferred.get(kind)
        if build is None:
            raise ToolError(f'no tool of kind "{kind}" on this worker')
        # Imports its libraries on the event loop, once (DuckDB: a fraction of a second).
        tool = self._tools[kind] = build()
        del self._deferred[kind]
        return tool

    async def close(self) -> None:
        for tool in self._tools.values():
            await tool.close()
