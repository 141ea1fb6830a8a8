"""Arcs, failures, joins, dead-path elimination and back-edges (ARCHITECTURE §7), driven by hand."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from unit_helpers import parse

from noetl_stream.testing import Reply, RouterHarness
from noetl_stream.testing.router_harness import Command


def statuses(harness: RouterHarness) -> dict[str, str]:
    return {name: rec.status for name, rec in harness.state.steps.items()}


# -- exclusive / inclusive ------------------------------------------------------------------------

BRANCHES = """
    workflow:
      - step: start
        next:
          spec: {mode: MODE}
          arcs:
            - step: small
              when: "{{ result.n < 10 }}"
            - step: even
              when: "{{ result.n % 2 == 0 }}"
            - step: other
      - step: small
      - step: even
      - step: other
"""


def test_router_exclusive_next_fires_only_the_first_matching_arc() -> None:
    harness = RouterHarness(parse(BRANCHES.replace("MODE", "exclusive")))
    harness.run(lambda c: Reply(result={"n": 4}))
    assert harness.fired_steps() == ["start", "small"]
    assert statuses(harness) == {"start": "completed", "small": "completed", "even": "skipped",
                                 "other": "skipped"}
    assert harness.state.status == "completed"


def test_router_exclusive_next_falls_through_to_the_unguarded_arc() -> None:
    harness = RouterHarness(parse(BRANCHES.replace("MODE", "exclusive")))
    harness.run(lambda c: Reply(result={"n": 11}))
    assert harness.fired_steps() == ["start", "other"]


def test_router_inclusive_next_fires_every_matching_arc() -> None:
    harness = RouterHarness(parse(BRANCHES.replace("MODE", "inclusive")))
    harness.run(lambda c: Reply(result={"n": 4}))
    assert harness.fired_steps() == ["start", "small", "even", "other"]


def test_router_list_next_is_inclusive() -> None:
    harness = RouterHarness(parse("""
        workflow:
          - step: start
            next: [a, b]
          - step: a
          - step: b
    """))
    assert [c["step"] for c in harness.pending] == ["start"]
    harness.answer(harness.pending[0])
    assert [c["step"] for c in harness.pending] == ["a", "b"]


def test_router_command_carries_the_run_and_task_pipeline() -> None:
    harness = RouterHarness(parse("""
        workload: {who: world}
        workflow:
          - step: start
            args: {greeting: hi}
            tool: {kind: python, code: "result = 1", input: {who: "{{ workload.who }}"}}
    """), execution_id="e42")
    (command,) = harness.pending
    assert command["execution_id"] == "e42"
    assert (command["step"], command["step_run_id"], command["iteration"]) == ("start", "e42.start.1", None)
    assert [t["kind"] for t in command["tasks"]] == ["python"]
    assert command["step_args"] == {"greeting": "hi"}
    assert command["context"]["workload"] == {"who": "world"}
    assert harness.event_types() == ["execution.started", "step.started"]


# -- success vs failure ----------------------------------------------------------------------------

FAILURE_ROUTED = """
    workflow:
      - step: start
        next:
          - step: recover
            when: "{{ event.name == 'step.failed' }}"
          - step: proceed
      - step: recover
      - step: proceed
"""


def test_router_arc_without_when_fires_on_success_only() -> None:
    harness = RouterHarness(parse(FAILURE_ROUTED))
    harness.run()
    assert harness.fired_steps() == ["start", "proceed"]
    assert harness.state.status == "completed"


def test_router_failure_is_routed_by_an_arc_whose_when_matches_it() -> None:
    harness = RouterHarness(parse(FAILURE_ROUTED))
    harness.run(lambda c: Reply(ok=False, error={"message": "boom"}) if c["step"] == "start" else Reply())
    assert harness.fired_steps() == ["start", "recover"]
    assert statuses(harness) == {"start": "failed", "recover": "completed", "proceed": "skipped"}
    assert harness.state.status == "completed"


def test_router_failure_guard_can_read_the_error() -> None:
    harness = RouterHarness(parse("""
        workflow:
          - step: start
            next:
              - step: retry_later
                when: "{{ error.message == 'rate limited' }}"
          - step: retry_later
    """))
    harness.run(lambda c: Reply(ok=False, error={"message": "rate limited"})
                if c["step"] == "start" else Reply())
    assert harness.fired_steps() == ["start", "retry_later"]


@pytest.mark.parametrize("mode", ["exclusive", "inclusive"])
def test_router_failed_step_does_not_follow_an_arc_true_for_another_reason(mode: str) -> None:
    harness = RouterHarness(parse(f"""
        workload: {{go: true}}
        workflow:
          - step: start
            next: {{spec: {{mode: {mode}}}, arcs: [{{step: b, when: "{{{{ workload.go }}}}"}}]}}
          - step: b
    """))
    harness.run(lambda c: Reply(ok=False, error={"message": "boom"}) if c["step"] == "start" else Reply())
    assert harness.fired_steps() == ["start"]
    assert harness.state.status == "failed"
    assert harness.state.error is not None and "boom" in harness.state.error["message"]


@pytest.mark.parametrize("when", [
    "{{ event.name == 'step.failed' }}", "{{ error is not none }}",
    "{{ error.message == 'boom' and workload.go }}",
])
def test_router_failed_step_follows_an_arc_written_for_failures(when: str) -> None:
    harness = RouterHarness(parse(f"""
        workload: {{go: true}}
        workflow:
          - step: start
            next: {{spec: {{mode: exclusive}}, arcs: [{{step: b, when: "{{{{ workload.go }}}}"}},
                                                 {{step: c, when: "{when}"}}]}}
          - step: b
          - step: c
    """))
    harness.run(lambda c: Reply(ok=False, error={"message": "boom"}) if c["step"] == "start" else Reply())
    assert harness.fired_steps() == ["start", "c"]
    assert harness.state.status == "completed"


def test_router_unhandled_failure_fails_the_execution_naming_the_step() -> None:
    harness = RouterHarness(parse("""
        workflow:
          - step: start
            next: load
          - step: load
            next: after
          - step: after
    """))
    harness.run(lambda c: Reply(ok=False, error={"message": "disk full"}) if c["step"] == "load" else Reply())
    assert harness.state.status == "failed"
    assert harness.state.error is not None
    assert harness.state.error["step"] == "load"
    assert harness.state.error["message"] == 'step "load" failed: disk full'
    assert "after" not in harness.fired_steps()
    (failed,) = harness.events_of("execution.failed")
    assert failed["error"]["step"] == "load"
    assert harness.pending == []


# -- joins and dead-path elimination ----------------------------------------------------------------

DIAMOND = """
    workflow:
      - step: start
        next: [a, b]
      - step: a
        next: join
      - step: b
        next: join
      - step: join
"""


def test_router_fires_join_once_after_both_branches() -> None:
    harness = RouterHarness(parse(DIAMOND))
    harness.answer(harness.pending[0])
    a, b = harness.pending
    harness.answer(a)
    assert harness.pending_for("join") == []
    harness.answer(b)
    assert len(harness.pending_for("join")) == 1
    harness.run()
    assert harness.fired_steps().count("join") == 1
    assert harness.state.status == "completed"


def test_router_join_fires_once_whichever_branch_answers_first() -> None:
    harness = RouterHarness(parse(DIAMOND))
    harness.answer(harness.pending[0])
    a, b = harness.pending
    harness.answer(b)
    harness.answer(a)
    harness.run()
    assert harness.fired_steps() == ["start", "a", "b", "join"]


def test_router_join_receives_args_from_every_branch() -> None:
    harness = RouterHarness(parse("""
        workflow:
          - step: start
            next: [a, b]
          - step: a
            next:
              - step: join
                args: {from_a: "{{ result }}"}
          - step: b
            next:
              - step: join
                args: {from_b: "{{ result }}"}
          - step: join
    """))
    harness.run(lambda c: Reply(result=c["step"]))
    (join,) = harness.commands_for("join")
    assert join["context"]["args"] == {"from_a": "a", "from_b": "b"}


def test_router_exclusive_branch_not_taken_still_lets_the_join_fire() -> None:
    harness = RouterHarness(parse("""
        workflow:
          - step: start
            next:
              spec: {mode: exclusive}
              arcs:
                - step: a
                  when: "{{ result.go == 'a' }}"
                - step: b
          - step: a
            next: join
          - step: b
            next: join
          - step: join
    """))
    harness.run(lambda c: Reply(result={"go": "a"}))
    assert harness.fired_steps() == ["start", "a", "join"]
    assert statuses(harness)["b"] == "skipped"
    assert harness.state.status == "completed"


def test_router_dead_path_propagates_through_a_chain_to_the_join() -> None:
    harness = RouterHarness(parse("""
        workflow:
          - step: start
            next:
              - step: a
              - step: b1
                when: "{{ false }}"
          - step: a
            next: join
          - step: b1
            next: b2
          - step: b2
            next: join
          - step: join
    """))
    harness.run()
    assert harness.fired_steps() == ["start", "a", "join"]
    assert statuses(harness)["b1"] == statuses(harness)["b2"] == "skipped"


def test_router_admission_denied_step_is_skipped_and_join_still_fires() -> None:
    harness = RouterHarness(parse("""
        workload: {enabled: false}
        workflow:
          - step: start
            next: [a, b]
          - step: a
            spec:
              policy:
                admit:
                  rules:
                    - when: "{{ workload.enabled }}"
                      then: {allow: true}
                    - else:
                        then: {allow: false}
            next: join
          - step: b
            next: join
          - step: join
    """))
    harness.run()
    assert harness.fired_steps() == ["start", "b", "join"]
    assert statuses(harness)["a"] == "skipped"
    (skipped,) = harness.events_of("step.skipped")
    assert (skipped["step"], skipped["reason"]) == ("a", "admission")
    assert harness.state.status == "completed"


def test_router_admission_allowed_step_runs() -> None:
    harness = RouterHarness(parse("""
        workload: {enabled: true}
        workflow:
          - step: start
            next: a
          - step: a
            when: "{{ workload.enabled }}"
    """))
    harness.run()
    assert harness.fired_steps() == ["start", "a"]


def test_router_join_whose_every_branch_is_ruled_out_is_skipped() -> None:
    harness = RouterHarness(parse("""
        workflow:
          - step: start
            next:
              - step: a
                when: "{{ false }}"
              - step: b
                when: "{{ false }}"
          - step: a
            next: join
          - step: b
            next: join
          - step: join
    """))
    harness.run()
    assert harness.fired_steps() == ["start"]
    assert statuses(harness)["join"] == "skipped"
    assert harness.state.status == "completed"


# -- back-edges ------------------------------------------------------------------------------------

PAGINATION = """
    workflow:
      - step: start
        next:
          - step: fetch
            args: {page: 1}
      - step: fetch
        next:
          spec: {mode: exclusive}
          arcs:
            - step: fetch
              when: "{{ result.more }}"
              args: {page: "{{ args.page + 1 }}"}
            - step: done
      - step: done
"""


def test_router_back_edge_reenters_the_step_until_the_guard_stops() -> None:
    harness = RouterHarness(parse(PAGINATION))
    pages: Iterator[bool] = iter([True, True, False])

    def respond(command: Command) -> Reply:
        if command["step"] == "fetch":
            return Reply(result={"more": next(pages), "page": command["context"]["args"]["page"]})
        return Reply()

    harness.run(respond)
    assert harness.fired_steps() == ["start", "fetch", "fetch", "fetch", "done"]
    assert harness.state.steps["fetch"].runs == 3
    assert [c["context"]["args"] for c in harness.commands_for("fetch")] == [
        {"page": 1}, {"page": 2}, {"page": 3}]
    assert [c["step_run_id"] for c in harness.commands_for("fetch")] == [
        "exec1.fetch.1", "exec1.fetch.2", "exec1.fetch.3"]
    assert harness.state.steps["fetch"].result == {"more": False, "page": 3}
    assert harness.state.status == "completed"


def test_router_back_edge_into_a_join_step_reenters_without_waiting() -> None:
    harness = RouterHarness(parse("""
        workflow:
          - step: start
            next: [a, b]
          - step: a
            next: join
          - step: b
            next: join
          - step: join
            next:
              - step: join
                when: "{{ args.again | default(true) and (ctx.rounds | default(0)) < 2 }}"
                set: {ctx.rounds: "{{ (ctx.rounds | default(0)) + 1 }}"}
    """))
    harness.run()
    assert harness.fired_steps().count("join") == 3
    assert harness.state.ctx == {"rounds": 2}
    assert harness.state.status == "completed"


@pytest.mark.parametrize("cycle", ["self", "two-step"])
def test_router_join_after_a_back_edge_loop_waits_for_the_loop_to_exit(cycle: str) -> None:
    # The loop's non-selected arc to the join must not count as ruled out while the loop goes on.
    again = 'when: "{{ result.more }}"'
    loop = (f"""
          - step: fetch
            next:
              spec: {{mode: exclusive}}
              arcs:
                - step: fetch
                  {again}
                - step: join
    """ if cycle == "self" else f"""
          - step: fetch
            next:
              spec: {{mode: exclusive}}
              arcs:
                - step: pause
                  {again}
                - step: join
          - step: pause
            next: fetch
    """)
    harness = RouterHarness(parse("""
        workflow:
          - step: start
            next: [side, fetch]
          - step: side
            next: join
    """ + loop + """
          - step: join
    """))
    more = iter([True, True, False])
    harness.answer(harness.pending[0])
    harness.answer(harness.pending_for("side")[0])
    while harness.pending_for("fetch") or harness.pending_for("pause"):
        command = (harness.pending_for("fetch") or harness.pending_for("pause"))[0]
        if command["step"] == "fetch":
            assert harness.pending_for("join") == []
            harness.answer(command, Reply(result={"more": next(more)}))
        else:
            harness.answer(command)
    assert harness.state.steps["fetch"].runs == 3
    assert len(harness.pending_for("join")) == 1
    harness.run()
    assert harness.fired_steps().count("join") == 1
    assert harness.state.status == "completed"


# -- implicit end ---------------------------------------------------------------------------------

def test_router_step_without_next_routes_to_the_step_named_end() -> None:
    harness = RouterHarness(parse("""
        workflow:
          - step: start
            next: step1
          - step: step1
          - step: end
    """))
    harness.run()
    assert harness.fired_steps() == ["start", "step1", "end"]
    assert harness.state.status == "completed"


def test_router_end_waits_for_every_leaf_and_skipped_branches_do_not_block_it() -> None:
    harness = RouterHarness(parse("""
        workflow:
          - step: start
            next:
              - step: a
              - step: b
                when: "{{ false }}"
          - step: a
          - step: b
          - step: end
    """))
    harness.run()
    assert harness.fired_steps() == ["start", "a", "end"]
    assert statuses(harness)["b"] == "skipped"
    assert harness.state.steps["end"].runs == 1


def test_router_without_an_end_step_a_step_without_next_ends_its_branch() -> None:
    harness = RouterHarness(parse("""
        workflow:
          - step: start
            next: finish
          - step: finish
          - step: unrelated
    """))
    harness.run()
    assert harness.fired_steps() == ["start", "finish"]
