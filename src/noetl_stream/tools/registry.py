"""Tool kinds by name: the built-ins plus any registered under the `noetl_stream.tools` entry point."""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import Any

from noetl_stream.errors import ToolError
from noetl_stream.tools.base import Tool
from noetl_stream.tools.http import HttpTool
from noetl_stream.tools.noop import NoopTool
from noetl_stream.tools.python import PythonTool

ENTRY_POINT_GROUP = "noetl_stream.tools"


class ToolRegistry:
    def __init__(self, tools: dict[str, Tool]) -> None:
        self._tools = tools

    @classmethod
    async def create(cls, *, python_children: int = 8, python_warm: int = 2) -> ToolRegistry:
        python = PythonTool(max_children=python_children, warm=python_warm)
        await python.start()
        tools: dict[str, Tool] = {"noop": NoopTool(), "http": HttpTool(), "python": python}
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            factory: Any = ep.load()
            tools[ep.name] = factory()
        return cls(tools)

    @property
    def kinds(self) -> list[str]:
        return sorted(self._tools)

    def get(self, kind: str) -> Tool:
        try:
            return self._tools[kind]
        except KeyError:
            raise ToolError(f'no tool of kind "{kind}" on this worker') from None

    async def close(self) -> None:
        for tool in self._tools.values():
            await tool.close()
