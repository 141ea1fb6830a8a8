"""The router side of the case dialect: step.enter / step.exit rules, routes chosen by case rules
and loops that a routed iteration ends early."""

from __future__ import annotations

from unit_helpers import parse

from noetl_stream.router import ExecutionState
from noetl_stream.testing.router_harness import Command, Reply, RouterHarness


def answer_route(harness: RouterHarness, step: str, route: str | None, result: object = None) -> None:
    (command,) = harness.pending_for(step)
    event = {"event_type": "step.done", "execution_id": command["execution_id"], "step": step,
             "step_run_id": command["step_run_id"], "iteration": command["iteration"],
             "pool": "default", "status": "ok", "result": result, "error": None, "ctx_patch": {},
             "http": None, "route": route}
    harness.pending.remove(command)
    harness.send(event)


ROUTES = """
    workflow:
      - step: start
        tool: {kind: noop}
        case:
          - when: "{{ event.name == 'call.done' and result.n > 1 }}"
            then:
              next:
                - step: big
                  args: {n: "{{ result.n }}"}
                - step: audit
        next: small
      - step: big
      - step: audit
      - step: small
"""


def test_router_fires_every_arc_of_the_chosen_route_and_skips_structural_next() -> None:
    harness = RouterHarness(parse(ROUTES))
    answer_route(harness, "start", "case[0]", {"n": 5})
    harness.run()
    assert harness.fired_steps() == ["start", "big", "audit"]
    assert harness.commands_for("big")[0]["context"]["args"] == {"n": 5}
    assert harness.state.steps["small"].status == "skipped"


def test_router_falls_back_to_structural_next_without_a_route() -> None:
    harness = RouterHarness(parse(ROUTES))
    answer_route(harness, "start", None, {"n": 1})
    harness.run()
    assert harness.fired_steps() == ["start", "small"]


def test_router_ignores_a_route_on_a_failed_outcome() -> None:
    harness = RouterHarness(parse(ROUTES))
    harness.run(lambda c: Reply(ok=False) if c["step"] == "start" else Reply())
    assert harness.state.status == "failed"
    assert harness.fired_steps() == ["start"]


def test_router_step_enter_rule_writes_ctx_before_the_first_command() -> None:
    harness = RouterHarness(parse("""
        workflow:
          - step: start
            tool: {kind: noop, input: {p: "{{ ctx.pages }}"}}
            case:
              - when: "{{ event.name == 'step.enter' and workload.mode == 'x' }}"
                then: {set: {ctx.pages: [1]}}
              - when: "{{ event.name == 'step.enter' }}"
                then: {set: {ctx.pages: []}}
    """), workload={"mode": "x"})
    (command,) = harness.pending
    assert command["context"]["ctx"] == {"pages": [1]}  # the first true rule wins
    harness.run()
    assert harness.state.ctx == {"pages": [1]}


def test_router_step_enter_fail_fails_the_step_without_a_command() -> None:
    harness = RouterHarness(parse("""
        workflow:
          - step: start
            case:
              - when: "{{ event.name == 'step.enter' }}"
                then: {fail: true}
    """))
    assert harness.commands == []
    assert harness.state.status == "failed"
    assert "failed the step on step.enter" in harness.state.error["message"]


def test_router_step_enter_skip_skips_the_step() -> None:
    harness = RouterHarness(parse("""
        workflow:
          - step: start
            next: maybe
          - step: maybe
            case:
              - when: "{{ event.name == 'step.enter' and workload.off }}"
                then: {skip: true}
    """), workload={"off": True})
    harness.run()
    assert harness.state.status == "completed"
    assert harness.state.steps["maybe"].status == "skipped"


EXIT = """
    workflow:
      - step: start
        tool: {kind: noop}
        case:
          - when: "{{ event.name == 'step.exit' and result.n > 10 }}"
            then: {fail: true}
          - when: "{{ event.name == 'step.exit' and result.n > 1 }}"
            then:
              set: {ctx.seen: "{{ result.n }}"}
              result: {from: "result.n * 2"}
              next: [{step: big, args: {doubled: "{{ result }}"}}]
        next: small
      - step: big
      - step: small
"""


def test_router_step_exit_rule_sets_ctx_overrides_result_and_routes() -> None:
    harness = RouterHarness(parse(EXIT))
    harness.run(lambda c: Reply(result={"n": 3}) if c["step"] == "start" else Reply())
    assert harness.fired_steps() == ["start", "big"]
    assert harness.state.steps["start"].result == 6
    assert harness.state.ctx == {"seen": 3}
    assert harness.commands_for("big")[0]["context"]["args"] == {"doubled": 6}


def test_router_step_exit_without_a_match_uses_structural_next() -> None:
    harness = RouterHarness(parse(EXIT))
    harness.run(lambda c: Reply(result={"n": 1}) if c["step"] == "start" else Reply())
    assert harness.fired_steps() == ["start", "small"]


def test_router_step_exit_fail_turns_success_into_failure() -> None:
    harness = RouterHarness(parse(EXIT))
    harness.run(lambda c: Reply(result={"n": 30}) if c["step"] == "start" else Reply())
    assert harness.state.status == "failed"
    assert harness.state.steps["start"].status == "failed"


def test_router_routed_iteration_ends_a_loop_early() -> None:
    harness = RouterHarness(parse("""
        workflow:
          - step: start
            loop: {in: "{{ [1, 2, 3, 4] }}", iterator: x}
            tool: {kind: noop}
            case:
              - when: "{{ event.name == 'call.done' and x == 2 }}"
                then:
                  next: [{step: found}]
            next: exhausted
          - step: found
          - step: exhausted
    """))

    def reply(command: Command) -> Reply | None:
        return None if command["step"] == "start" else Reply()

    for index in range(2):
        (command,) = harness.pending_for("start")
        event_route = "case[0]" if index == 1 else None
        harness.pending.remove(command)
        harness.send({"event_type": "loop.iteration.done", "execution_id": "exec1", "step": "start",
                      "pool": "default", "status": "ok",
                      "step_run_id": command["step_run_id"], "iteration": command["iteration"],
                      "result": command["iteration"], "error": None, "ctx_patch": {},
                      "route": event_route})
    state: ExecutionState = harness.run(reply)
    assert state.status == "completed"
    assert harness.fired_steps() == ["start", "found"]
    assert state.steps["start"].result == [0, 1]
    assert len(harness.commands_for("start")) == 2
