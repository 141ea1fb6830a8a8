"""Spec 001 case knobs at run time: the compiled pipeline run by the real `Pipeline` (with a
recording tool) and its outcomes fed to the router, which publishes `case.evaluated`,
`next.evaluated` and `case.branch.suppressed`."""

from __future__ import annotations

from typing import Any

from unit_helpers import parse

from noetl_stream.messages import Command
from noetl_stream.router import ExecutionState
from noetl_stream.testing.router_harness import RouterHarness
from noetl_stream.tools.base import Outcome, TaskCall
from noetl_stream.tools.registry import ToolRegistry
from noetl_stream.worker.pipeline import Pipeline


class Recorder:
    """A noop that records which tasks ran; a task whose input has `fail: true` fails."""

    kind = "noop"

    def __init__(self) -> None:
        self.tasks: list[str] = []

    async def run(self, call: TaskCall) -> Outcome:
        self.tasks.append(call.task)
        if call.input.get("fail"):
            return Outcome.failure("boom", "test")
        return Outcome.success(call.input or None)

    async def close(self) -> None:
        return None


async def drive(body: str, workload: dict[str, Any] | None = None
                ) -> tuple[RouterHarness, Recorder, ExecutionState]:
    """Run every command through the real pipeline and feed its outcome to the router."""
    harness = RouterHarness(parse(body), workload=workload)
    recorder = Recorder()
    while harness.pending:
        command = harness.pending.pop(0)
        result = await Pipeline(Command.model_validate(command), ToolRegistry({"noop": recorder}),
                                idempotency_prefix=command["step_run_id"]).run()
        harness.send({"event_type": "step.done" if result.ok else "step.failed",
                      "execution_id": command["execution_id"], "step": command["step"],
                      "step_run_id": command["step_run_id"], "iteration": command["iteration"],
                      "pool": "default", "status": "ok" if result.ok else "error",
                      "result": result.result, "error": result.error,
                      "ctx_patch": result.ctx_patch, "http": result.http, "route": result.route,
                      "case_matched": result.case_matched})
    return harness, recorder, harness.state


def playbook(mode: str, policy: str, *, first: str = "true", second: str = "true") -> str:
    return f"""
        workflow:
          - step: start
            spec: {{case_mode: {mode}, next_policy: {policy}}}
            tool: {{kind: noop, input: {{total: 1500}}}}
            case:
              - when: "{{{{ {first} }}}}"
                then:
                  - a1: {{tool: {{kind: noop, input: {{from: a}}}}}}
                  - next: {{to: [{{step: left}}]}}
                  - a2: {{tool: {{kind: noop}}}}
              - when: "{{{{ {second} }}}}"
                then:
                  - b1: {{tool: {{kind: noop, input: {{from: b}}}}}}
                  - next: {{to: [{{step: right}}]}}
              - else:
                  - e1: {{tool: {{kind: noop}}}}
          - step: left
          - step: right
    """.replace("- a2: {tool: {kind: noop}}\n", "- a2: {tool: {kind: noop}}\n"
                if policy == "defer" else "\n")


async def test_exclusive_runs_only_the_first_true_branch() -> None:
    harness, recorder, state = await drive(playbook("exclusive", "end_step"))
    assert recorder.tasks == ["start_task", "a1", "left_task"]
    assert state.status == "completed"
    assert state.steps["start"].result == {"from": "a"}
    (evaluated,) = harness.events_of("case.evaluated")
    assert (evaluated["matched"], evaluated["case_mode"]) == (["case_0"], "exclusive")
    (chosen,) = harness.events_of("next.evaluated")
    assert (chosen["winner_branch"], chosen["selected"], chosen["suppressed_branches"]) == (
        "case_0", [{"step": "left", "with": {}}], [])
    assert state.steps["right"].status == "skipped"


async def test_exclusive_falls_to_else_and_then_to_structural_next() -> None:
    _, recorder, state = await drive(playbook("exclusive", "end_step", first="false",
                                              second="false"))
    assert recorder.tasks == ["start_task", "e1"]
    assert state.status == "completed"
    assert state.steps["left"].status == "skipped" and state.steps["right"].status == "skipped"


async def test_inclusive_end_step_ends_at_the_first_next_and_suppresses_the_rest() -> None:
    harness, recorder, state = await drive(playbook("inclusive", "end_step"))
    assert recorder.tasks == ["start_task", "a1", "left_task"]
    (evaluated,) = harness.events_of("case.evaluated")
    assert evaluated["matched"] == ["case_0", "case_1"]
    (chosen,) = harness.events_of("next.evaluated")
    assert (chosen["policy"], chosen["suppressed_branches"]) == ("end_step", ["case_1"])
    (suppressed,) = harness.events_of("case.branch.suppressed")
    assert (suppressed["branch"], suppressed["winner_branch"]) == ("case_1", "case_0")
    assert state.steps["right"].status == "skipped"
    order = harness.event_types()
    assert order.index("case.evaluated") < order.index("next.evaluated")


async def test_inclusive_break_chain_runs_every_selected_branch_and_the_first_next_wins() -> None:
    harness, recorder, state = await drive(playbook("inclusive", "break_chain"))
    assert recorder.tasks == ["start_task", "a1", "b1", "left_task"]
    (chosen,) = harness.events_of("next.evaluated")
    assert (chosen["winner_branch"], chosen["suppressed_branches"]) == ("case_0", [])
    assert harness.events_of("case.branch.suppressed") == []
    assert state.steps["start"].result == {"from": "b"}  # the last task that ran


async def test_inclusive_selection_is_made_once_on_the_entry_outcome() -> None:
    # `result.total` is true for the entry outcome but not for a1's, which ran in between.
    _, recorder, _ = await drive(playbook("inclusive", "break_chain", second="result.total > 1"))
    assert recorder.tasks == ["start_task", "a1", "b1", "left_task"]


async def test_defer_runs_the_tasks_after_next() -> None:
    _, recorder, state = await drive(playbook("inclusive", "defer"))
    assert recorder.tasks == ["start_task", "a1", "a2", "b1", "left_task"]
    assert state.status == "completed"


async def test_branch_order_priority_runs_the_highest_priority_first() -> None:
    harness, recorder, _ = await drive("""
        workflow:
          - step: start
            spec: {case_mode: inclusive, branch_order: priority, next_policy: break_chain}
            case:
              - when: "{{ true }}"
                priority: 1
                then:
                  - low: {tool: {kind: noop}}
                  - next: {to: [left]}
              - when: "{{ true }}"
                priority: 5
                then:
                  - high: {tool: {kind: noop}}
                  - next: {to: [right]}
          - step: left
          - step: right
    """)
    assert recorder.tasks == ["start_task", "high", "low", "right_task"]
    (evaluated,) = harness.events_of("case.evaluated")
    assert evaluated["matched"] == ["case_1", "case_0"]


async def test_templated_next_goes_to_the_step_the_template_names() -> None:
    _, recorder, state = await drive("""
        workflow:
          - step: start
            tool: {kind: noop, input: {valid: false}}
            case:
              - when: "{{ true }}"
                then:
                  - next:
                      to: [{step: "{{ 'good' if result.valid else 'bad' }}", args: {v: 1}}]
          - step: good
          - step: bad
            tool: {kind: noop, input: {v: "{{ args.v }}"}}
    """)
    assert recorder.tasks == ["start_task", "start_case_0", "bad_task"]
    assert state.steps["bad"].result == {"v": 1}
    assert state.steps["good"].status == "skipped"


async def test_task_retry_in_a_chain_retries_then_fails_the_step() -> None:
    _, recorder, state = await drive("""
        workflow:
          - step: start
            case:
              - when: "{{ true }}"
                then:
                  - flaky:
                      tool: {kind: noop, input: {fail: true}}
                      retry: {max_attempts: 3, initial_delay: 0}
    """)
    assert recorder.tasks == ["start_task", "flaky", "flaky", "flaky"]
    assert state.status == "failed"


DEFER_PRIORITY = """
    workflow:
      - step: start
        spec: {case_mode: inclusive, next_policy: defer}
        tool: {kind: noop}
        case:
          - when: "{{ true }}"
            then:
              - a1: {tool: {kind: noop}}
              - next: {to: [left], priority: LEFT}
          - when: "{{ true }}"
            then:
              - b1: {tool: {kind: noop}}
              - next: {to: [right], priority: RIGHT}
      - step: left
      - step: right
"""


async def test_defer_routes_to_the_next_with_the_highest_priority() -> None:
    harness, recorder, state = await drive(DEFER_PRIORITY.replace("LEFT", "1")
                                           .replace("RIGHT", "5"))
    assert recorder.tasks == ["start_task", "a1", "b1", "right_task"]
    (chosen,) = harness.events_of("next.evaluated")
    assert (chosen["winner_branch"], chosen["policy"]) == ("case_1", "defer")
    assert state.steps["left"].status == "skipped" and state.status == "completed"


async def test_defer_among_equal_priorities_the_first_next_reached_wins() -> None:
    _, recorder, _ = await drive(DEFER_PRIORITY.replace("LEFT", "3").replace("RIGHT", "3"))
    assert recorder.tasks == ["start_task", "a1", "b1", "left_task"]
    _, recorder, _ = await drive(DEFER_PRIORITY.replace("LEFT", "9").replace("RIGHT", "2"))
    assert recorder.tasks == ["start_task", "a1", "b1", "left_task"]
