"""The python tool starting beside the rest of a `noetl-stream run`, instead of before it.

Starting the python tool (a round trip as the sandbox user, the fork server, the interpreters kept
ready) takes ~0.3 s of wall time; a worker awaited it before it took its first command, so every
`run` paid it before its first step, python steps or not. Here the start runs as a task while the
server and worker start and the first steps run: a python call waits for it, and a start that
failed is that call's error (a service worker still fails to start instead: tools/registry.py).
"""

from __future__ import annotations

import asyncio
import contextlib

from noetl_stream.tools.base import Outcome, TaskCall
from noetl_stream.tools.python import PythonTool


class StartingPython:
    """A PythonTool whose start is under way."""

    kind = "python"

    def __init__(self, tool: PythonTool) -> None:
        self._tool = tool
        self._start = asyncio.create_task(tool.start(), name="python-start")

    async def run(self, call: TaskCall) -> Outcome:
        try:
            await asyncio.shield(self._start)  # a cancelled call leaves the start running
        except Exception as exc:  # the sandbox cannot be set up as configured, ...
            return Outcome.failure(f"python steps cannot start: {exc}", "config")
        return await self._tool.run(call)

    async def close(self) -> None:
        # Let the start finish: cancelled halfway, interpreters it spawned would not be closed.
        with contextlib.suppress(Exception):
            await self._start
        await self._tool.close()
