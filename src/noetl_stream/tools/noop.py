"""`noop`: does nothing, useful for routing steps. Its result is its rendered `result:` when given
(NoETL's noop tool), else `{status: ok, message}` when it has a `message:`, else its rendered
input (or null).
"""

from __future__ import annotations

from noetl_stream.tools.base import Outcome, TaskCall, ToolServices


class NoopTool:
    kind = "noop"

    def __init__(self, services: ToolServices | None = None) -> None:
        del services  # noop needs nothing

    async def run(self, call: TaskCall) -> Outcome:
        if "result" in call.config:
            return Outcome.success(call.config["result"])
        if "message" in call.config:
            return Outcome.success({"status": "ok", "message": call.config["message"]})
        return Outcome.success(call.input or None)

    async def close(self) -> None:
        return None
