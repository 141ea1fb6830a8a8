"""A task's own `set:` reads `output` as the result its tool returned (NoETL's task sequence);
a policy rule's `set:` reads `output` as the outcome envelope."""

from __future__ import annotations

from typing import Any

from unit_helpers import parse

from noetl_stream.messages import Command
from noetl_stream.tools.base import Outcome, TaskCall
from noetl_stream.tools.registry import ToolRegistry
from noetl_stream.worker.pipeline import Pipeline


class Scripted:
    """Returns the results it is given, in order, and records each call's rendered config."""

    kind = "python"

    def __init__(self, results: list[Any]) -> None:
        self.results = list(results)
        self.configs: list[dict[str, Any]] = []

    async def run(self, call: TaskCall) -> Outcome:
        self.configs.append(call.config)
        return Outcome.success(self.results.pop(0))

    async def close(self) -> None:
        return None


async def run_step(body: str, results: list[Any]) -> tuple[Scripted, Any]:
    step = parse(body).step("start")
    command = {"execution_id": "e1", "step": "start", "step_run_id": "r1", "iteration": None,
               "tasks": [t.model_dump(mode="json") for t in step.tasks],
               "context": {"workload": {}, "ctx": {}, "args": {}, "iter": {}}}
    tool = Scripted(results)
    tools = ToolRegistry({"python": tool, "postgres": tool})
    outcome = await Pipeline(Command.model_validate(command), tools, idempotency_prefix="r1").run()
    assert outcome.ok, outcome.error
    return tool, outcome


async def test_a_task_set_binds_the_tool_result_a_policy_rule_set_the_envelope() -> None:
    tool, outcome = await run_step("""
        workflow:
          - step: start
            tool:
              - name: make
                kind: python
                code: "pass"
                set:
                  generated: "{{ output }}"
                  ctx.record_id: "{{ output.data.record_id }}"
                spec:
                  policy:
                    rules:
                      - else:
                          then:
                            do: continue
                            set:
                              ctx.outcome_status: "{{ output.status }}"
                              ctx.inner: "{{ output.data.data.record_id }}"
              - name: save
                kind: postgres
                command: "VALUES ('{{ generated.data.record_id }}', '{{ generated.status }}')"
    """, [{"status": "success", "data": {"record_id": 100}}, {"affected_rows": 1}])
    assert tool.configs[1]["command"] == "VALUES ('100', 'success')"
    assert outcome.ctx_patch == {"record_id": 100, "outcome_status": "ok", "inner": 100}
