"""A tool that raises (a plugin's ValueError or KeyError) fails its task as a tool failure with
the exception named: the command itself was read fine, so it is not reported as malformed.
"""

from __future__ import annotations

import pytest
from unit_helpers import parse

from noetl_stream.messages import Command
from noetl_stream.tools.base import Outcome, TaskCall
from noetl_stream.tools.registry import ToolRegistry
from noetl_stream.worker.pipeline import Pipeline


class Raising:
    """A tool whose own code raises the exception it is given."""

    kind = "python"

    def __init__(self, exc: Exception) -> None:
        self.exc = exc

    async def run(self, call: TaskCall) -> Outcome:
        raise self.exc

    async def close(self) -> None:
        return None


@pytest.mark.parametrize(("exc", "shown"), [
    (ValueError("bad row 3"), 'task "start_task" (python) failed: ValueError: bad row 3'),
    (KeyError("id"), 'task "start_task" (python) failed: KeyError: \'id\''),
])
async def test_a_tools_own_exception_is_a_tool_failure(exc: Exception, shown: str) -> None:
    step = parse("""
        workflow:
          - step: start
            tool: {kind: python, code: "result = 1"}
    """).step("start")
    command = {"execution_id": "e1", "step": "start", "step_run_id": "r1", "iteration": None,
               "tasks": [t.model_dump(mode="json") for t in step.tasks],
               "context": {"workload": {}, "ctx": {}, "args": {}, "iter": {}}}
    outcome = await Pipeline(Command.model_validate(command), ToolRegistry({"python": Raising(exc)}),
                             idempotency_prefix="r1").run()
    assert not outcome.ok
    assert outcome.error is not None
    assert outcome.error["kind"] == "tool"
    assert outcome.error["message"] == shown
