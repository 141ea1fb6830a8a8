"""An example tool plugin for noetl-stream: kind `upper` returns its input `text` upper-cased.

    - step: shout
      tool:
        kind: upper
        input:
          text: "{{ workload.word }}"

A tool is any object with `kind`, `async run(call) -> Outcome` and `async close()`. `run` reports
a failure of the work as an error outcome rather than raising.
"""

from __future__ import annotations

from noetl_stream.tools.base import Outcome, TaskCall, ToolServices


class UpperTool:
    kind = "upper"

    def __init__(self, services: ToolServices) -> None:
        self.services = services  # shared clients (NATS, credentials); this tool needs none

    async def run(self, call: TaskCall) -> Outcome:
        text = call.input.get("text")
        if not isinstance(text, str):
            return Outcome.failure("upper needs input text, a string", "config")
        return Outcome.success(text.upper())

    async def close(self) -> None:
        return None
