"""A pipeline step's per-task results, read as NoETL's Python engine keeps them
(`{{ page.results.check.more }}`): found statically, asked for by the step's commands, and kept
by the worker in the step's result under `results`."""

from __future__ import annotations

from typing import Any

from unit_helpers import parse

from noetl_stream.messages import Command
from noetl_stream.router.reads import task_results_read
from noetl_stream.testing import Reply, RouterHarness
from noetl_stream.tools.base import Outcome, TaskCall
from noetl_stream.tools.registry import ToolRegistry
from noetl_stream.worker.pipeline import Pipeline

PAGES = """
    workflow:
      - step: start
        tool:
          - name: fetch
            kind: http
            url: http://api/items
          - name: check
            kind: python
            code: "result = {'more': False}"
        next:
          spec: {mode: exclusive}
          arcs:
            - step: start
              when: "{{ start.results.check.more }}"
            - step: report
      - step: report
        tool: {kind: noop, input: {n: "{{ start['results']['fetch'].data | length }}"}}
      - step: looped
        loop: {in: "{{ [1] }}", iterator: x}
        tool: {kind: python, code: "result = x"}
      - step: plain
        tool: {kind: python, code: "result = {'results': 1}"}
        next: [{step: last, when: "{{ looped.results | length > 0 and plain.count > 0 }}"}]
      - step: last
"""


def test_the_steps_whose_results_a_template_reads_are_found_statically() -> None:
    # `looped.results` are a loop's iterations, and `plain` is read, but not its `results`.
    assert task_results_read(parse(PAGES)) == {"start"}


def test_only_those_steps_commands_ask_for_the_task_results() -> None:
    harness = RouterHarness(parse(PAGES))
    kept = {"more": False, "results": {"check": {"more": False}, "fetch": {"data": [1, 2]}}}
    harness.run(lambda c: Reply(result=kept if c["step"] == "start" else {"x": 1}))
    assert harness.state.status == "completed"
    assert [c.get("task_results", False) for c in harness.commands_for("start")] == [True]
    assert "task_results" not in harness.commands_for("report")[0]


class Scripted:
    kind = "python"

    def __init__(self, outcomes: list[Outcome]) -> None:
        self.outcomes = outcomes

    async def run(self, call: TaskCall) -> Outcome:
        return self.outcomes.pop(0)

    async def close(self) -> None:
        return None


async def run_start(task_results: bool) -> Any:
    step = parse(PAGES).step("start")
    command = {"execution_id": "e1", "step": "start", "step_run_id": "r1", "iteration": None,
               "tasks": [t.model_dump(mode="json") for t in step.tasks],
               "context": {"workload": {}, "ctx": {}, "args": {}, "iter": {}}}
    if task_results:
        command["task_results"] = True
    body = {"data": [{"id": 1}], "paging": {"page": 1}}
    tool = Scripted([Outcome.success(body, http={"status": 200, "headers": {"a": "b"}}),
                     Outcome.success({"more": True})])
    outcome = await Pipeline(Command.model_validate(command), ToolRegistry({"python": tool, "http": tool}),
                             idempotency_prefix="r1").run()
    assert outcome.ok, outcome.error
    return outcome.result


async def test_the_worker_keeps_each_task_s_result_when_asked() -> None:
    assert await run_start(False) == {"more": True}
    assert await run_start(True) == {"more": True, "results": {
        "fetch": {"status_code": 200, "headers": {"a": "b"},
                  "data": {"data": [{"id": 1}], "paging": {"page": 1}}},
        "check": {"more": True}}}
