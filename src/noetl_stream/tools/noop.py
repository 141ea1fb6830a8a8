"""`noop`: does nothing; its result is its rendered input (or null), useful for routing steps."""

from __future__ import annotations

from noetl_stream.tools.base import Outcome, TaskCall, ToolServices


class NoopTool:
    kind = "noop"

    def __init__(self, services: ToolServices | None = None) -> None:
        del services  # noop needs nothing

    async def run(self, call: TaskCall) -> Outcome:
        return Outcome.success(call.input or None)

    async def close(self) -> None:
        return None
