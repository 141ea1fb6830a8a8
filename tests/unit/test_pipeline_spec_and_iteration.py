"""What the pipeline hands a tool from the IR: the task's effective spec and timeout (spec 002
§3), and the loop iteration a child playbook sees as `iter.parent` (spec 002 §6.4)."""

from __future__ import annotations

from typing import Any

from unit_helpers import parse

from noetl_stream.messages import Command
from noetl_stream.tools.base import Outcome, TaskCall
from noetl_stream.tools.registry import ToolRegistry
from noetl_stream.worker.pipeline import Pipeline


class Recorder:
    kind = "playbook"

    def __init__(self) -> None:
        self.calls: list[TaskCall] = []

    async def run(self, call: TaskCall) -> Outcome:
        self.calls.append(call)
        return Outcome.success(None)

    async def close(self) -> None:
        return None


BODY = """
    executor:
      spec: {labels: {a: 1}}
    workflow:
      - step: start
        spec: {timeout: 7, labels: {b: 2}}
        tool:
          - name: outer
            kind: playbook
            path: catalog/child
          - name: inner
            kind: playbook
            path: catalog/child
            spec: {timeout: 2.5}
"""


async def run(iteration: int | None, iter_vars: dict[str, Any]) -> Recorder:
    step = parse(BODY).step("start")
    command = {"execution_id": "e1", "step": "start", "step_run_id": "r1", "iteration": iteration,
               "tasks": [t.model_dump(mode="json") for t in step.tasks],
               "context": {"workload": {}, "ctx": {}, "args": {}, "iter": iter_vars}}
    tool = Recorder()
    result = await Pipeline(Command.model_validate(command),
                            ToolRegistry({"playbook": tool}), idempotency_prefix="r1").run()
    assert result.ok
    return tool


async def test_tools_get_the_effective_spec_and_its_timeout() -> None:
    outer, inner = (await run(None, {})).calls
    assert (outer.spec, outer.timeout_s) == ({"timeout": 7, "labels": {"a": 1, "b": 2}}, 7.0)
    assert (inner.spec, inner.timeout_s) == ({"timeout": 2.5, "labels": {"a": 1, "b": 2}}, 2.5)


async def test_a_task_in_a_loop_iteration_carries_that_iteration() -> None:
    scope = {"city": "Oslo", "_index": 0, "parent": {"country": "NO"}}
    call = (await run(0, scope)).calls[0]
    assert call.iteration == scope


async def test_outside_a_loop_the_iteration_is_the_inherited_parent_or_none() -> None:
    assert (await run(None, {})).calls[0].iteration is None
    inherited = {"country": "NO", "_index": 3}
    assert (await run(None, {"parent": inherited})).calls[0].iteration == inherited
