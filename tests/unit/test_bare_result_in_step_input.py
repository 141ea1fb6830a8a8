"""A bare `result` means the finished step's result in its own `next` guards and `set:`, and
nothing in the templates of the step it routes to: NoETL's server builds a step's render context
from the workload, the steps by name, `steps`, ctx and the execution's identity, with no
`result` (orchestrate-core `WorkflowState::build_context`), and its Python engine renders a new
step's command against an empty event. So `{{ result }}` in the next step's input is null here,
as an undefined name is on NoETL's server; the routed result is read by the step's name."""

from __future__ import annotations

from unit_helpers import parse

from noetl_stream.messages import Command
from noetl_stream.testing import Reply, RouterHarness
from noetl_stream.tools.base import Outcome, TaskCall
from noetl_stream.tools.registry import ToolRegistry
from noetl_stream.worker.pipeline import Pipeline

PLAYBOOK = """
    workflow:
      - step: start
        tool: {kind: python, code: "result = {'status': 'success'}"}
        set: {ctx.seen: "{{ result.status }}"}
        next:
          spec: {mode: exclusive}
          arcs:
            - step: end
              when: "{{ result.status == 'success' }}"
      - step: end
        tool:
          kind: python
          input: {result: "{{ result }}", routed: "{{ start.status }}"}
          code: "result = {'test': 'passed'}"
"""


class Recording:
    kind = "python"

    def __init__(self) -> None:
        self.calls: list[TaskCall] = []

    async def run(self, call: TaskCall) -> Outcome:
        self.calls.append(call)
        return Outcome.success({"test": "passed"})

    async def close(self) -> None:
        return None


def routed_harness() -> RouterHarness:
    harness = RouterHarness(parse(PLAYBOOK))
    harness.run(lambda c: Reply(result={"status": "success"} if c["step"] == "start"
                                else {"test": "passed"}))
    return harness


def test_result_in_the_finished_steps_guards_and_set_is_its_result() -> None:
    harness = routed_harness()

    assert harness.state.status == "completed"
    assert harness.fired_steps().count("end") == 1
    assert harness.state.ctx["seen"] == "success"


async def end_input(harness: RouterHarness) -> dict[str, object]:
    """The input the worker renders for `end` from the command the router published."""
    (command,) = harness.commands_for("end")
    tool = Recording()
    outcome = await Pipeline(Command.model_validate(command),
                             ToolRegistry({"python": tool}), idempotency_prefix="r1").run()
    assert outcome.ok, outcome.error
    (call,) = tool.calls
    return call.input


async def test_bare_result_in_the_next_steps_input_is_null_and_the_step_name_reads_it() -> None:
    harness = routed_harness()

    assert "result" not in harness.commands_for("end")[0]["context"]
    assert await end_input(harness) == {"result": None, "routed": "success"}


async def test_a_workload_key_named_result_is_what_the_bare_name_reads() -> None:
    playbook = parse(PLAYBOOK.replace("    workflow:", "    workload: {result: {status: w}}\n"
                                      "    workflow:", 1))
    harness = RouterHarness(playbook)
    harness.run(lambda c: Reply(result={"status": "success"}))

    assert await end_input(harness) == {"result": {"status": "w"}, "routed": "success"}
