"""A task without templates (and not python) is called without building the pipeline's names
(worker/task_views.py `reads_names`): its call is what it would be with them, a fresh copy of
its config each time, and a task with a template anywhere in its config or input is rendered."""

from __future__ import annotations

from unit_helpers import parse

from noetl_stream.messages import Command
from noetl_stream.tools.base import Outcome, TaskCall
from noetl_stream.tools.registry import ToolRegistry
from noetl_stream.worker.pipeline import Pipeline
from noetl_stream.worker.task_views import reads_names


class Meddler:
    """Records each call, then changes the config it was handed."""

    kind = "noop"

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []  # config and input, as they were handed over

    async def run(self, call: TaskCall) -> Outcome:
        self.calls.append((repr(call.config), repr(call.input)))
        result = call.config.get("result")
        if isinstance(result, dict):
            result["rows"].append("added by the tool")
        return Outcome.success(result)

    async def close(self) -> None:
        return None


BODY = """
    workflow:
      - step: start
        tool:
          - name: constant
            kind: noop
            result: {rows: [1, "two"], note: "no braces here"}
          - name: templated
            kind: noop
            input: {deep: [{x: "{{ workload.x }}"}]}
"""


def command(step_run_id: str) -> Command:
    step = parse(BODY).step("start")
    return Command.model_validate({
        "execution_id": "e1", "step": "start", "step_run_id": step_run_id,
        "tasks": [t.model_dump(mode="json") for t in step.tasks],
        "context": {"workload": {"x": 41}}})


def test_which_tasks_read_the_names() -> None:
    constant, templated = command("r0").tasks.tasks
    assert not reads_names(constant)
    assert reads_names(templated)  # a template three levels down in its input
    python = parse("""
    workflow:
      - step: start
        tool: {kind: python, code: "result = 1"}
""").step("start").tasks[0]
    assert reads_names(python)  # its code gets the names, templates or not


async def test_constant_and_templated_calls() -> None:
    tool = Meddler()
    tools = ToolRegistry({"noop": tool})
    for run in ("r1", "r2"):
        result = await Pipeline(command(run), tools, idempotency_prefix=run).run()
        assert result.ok
    # Each run's constant call got the config as written, not the copy the first run's tool
    # changed; the templated call got its template rendered.
    constant_calls = [c for c in tool.calls if "rows" in c[0]]
    assert len(constant_calls) == 2 and constant_calls[0] == constant_calls[1]
    assert "'rows': [1, 'two']" in constant_calls[0][0]
    templated_calls = [c for c in tool.calls if "deep" in c[1]]
    assert templated_calls == [("{}", "{'deep': [{'x': 41}]}")] * 2
