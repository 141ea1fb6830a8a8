"""The worker side of the case dialect: case rules as task policy rules in the pipeline, run
against a scripted http tool (no network)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from unit_helpers import parse

from noetl_stream.messages import Command
from noetl_stream.tools.base import Outcome, TaskCall
from noetl_stream.tools.registry import ToolRegistry
from noetl_stream.worker.pipeline import Pipeline, PipelineResult, backoff_delay, case_views


class ScriptedHttp:
    """An http tool whose reply is chosen by a function of the call; it records every call."""

    kind = "http"

    def __init__(self, reply: Callable[[TaskCall], Outcome]) -> None:
        self.reply = reply
        self.calls: list[TaskCall] = []

    async def run(self, call: TaskCall) -> Outcome:
        self.calls.append(call)
        return self.reply(call)

    async def close(self) -> None:
        return None


def page(call: TaskCall) -> Outcome:
    number = int(call.config["params"]["page"])
    body = {"data": [number * 10 + 1, number * 10 + 2], "paging": {"page": number,
                                                                  "hasMore": number < 3}}
    return Outcome.success(body, http={"status": 200, "headers": {}})


async def run_step(body: str, tool: ScriptedHttp, ctx: dict[str, Any] | None = None) -> PipelineResult:
    step = parse(body).step("start")
    command = {"execution_id": "e1", "step": "start", "step_run_id": "r1",
               "tasks": [t.model_dump(mode="json") for t in step.tasks],
               "context": {"workload": {}, "ctx": ctx or {}, "args": {}, "iter": {}}}
    return await Pipeline(Command.model_validate(command),
                          ToolRegistry({"http": tool}), idempotency_prefix="r1:None").run()


PAGINATE = """
    workflow:
      - step: start
        tool:
          kind: http
          url: http://api/items
          params: {page: 1, size: 2}
        case:
          - when: "{{ event.name == 'call.done' and response.paging.hasMore }}"
            then:
              collect: {from: response.data, into: pages, mode: extend}
              call:
                params: {page: "{{ response.paging.page + 1 }}"}
          - when: "{{ event.name == 'call.done' }}"
            then:
              collect: {from: response.data, into: pages, mode: extend}
              result: {from: pages}
              next: [{step: done}]
      - step: done
"""


async def test_pipeline_call_reruns_the_task_with_overrides_merged_into_its_config() -> None:
    tool = ScriptedHttp(page)
    result = await run_step(PAGINATE, tool, ctx={"pages": []})
    assert result.ok
    assert [c.config["params"] for c in tool.calls] == [
        {"page": 1, "size": 2}, {"page": 2, "size": 2}, {"page": 3, "size": 2}]


async def test_pipeline_collect_result_and_route_make_the_outcome() -> None:
    result = await run_step(PAGINATE, ScriptedHttp(page), ctx={"pages": []})
    assert result.result == [11, 12, 21, 22, 31, 32]
    assert result.ctx_patch == {"pages": [11, 12, 21, 22, 31, 32]}
    assert result.route == "case[1]"


async def test_pipeline_collect_starts_from_nothing_when_the_name_is_unset() -> None:
    result = await run_step(PAGINATE, ScriptedHttp(page))
    assert result.result == [11, 12, 21, 22, 31, 32]


RETRY = """
    workflow:
      - step: start
        tool: {kind: http, url: http://api/flaky}
        case:
          - when: "{{ event.name == 'call.error' and error.status == 503 }}"
            then:
              retry: {max_attempts: 3, initial_delay: 0}
          - when: "{{ event.name == 'call.done' and response.status_code == 200 }}"
            then:
              set: {ctx.ok_on: "{{ _attempt }}"}
"""


def flaky(failures: int) -> Callable[[TaskCall], Outcome]:
    def reply(call: TaskCall) -> Outcome:
        if call.attempt <= failures:
            return Outcome.failure("unavailable", "http", status=503, body={"why": "busy"},
                                   http={"status": 503, "headers": {}})
        return Outcome.success({"fine": True}, http={"status": 200, "headers": {}})
    return reply


async def test_pipeline_retry_rule_repeats_the_call_until_it_succeeds() -> None:
    tool = ScriptedHttp(flaky(2))
    result = await run_step(RETRY, tool)
    assert result.ok
    assert [c.attempt for c in tool.calls] == [1, 2, 3]
    assert result.ctx_patch == {"ok_on": 3}  # response.status_code fell back to the HTTP status


async def test_pipeline_retry_rule_gives_up_after_max_attempts() -> None:
    tool = ScriptedHttp(flaky(5))
    result = await run_step(RETRY, tool)
    assert not result.ok
    assert len(tool.calls) == 3


async def test_pipeline_call_error_rule_is_not_seen_by_ok_outcomes() -> None:
    result = await run_step("""
        workflow:
          - step: start
            tool: {kind: http, url: http://api/x}
            case:
              - when: "{{ event.name == 'call.error' or true }}"
                then: {fail: true}
    """, ScriptedHttp(flaky(0)))
    # `or true` makes the event unreadable: the entry is placed at call.error and call.done, and
    # the call.done copy fails the ok outcome.
    assert not result.ok


async def test_pipeline_call_done_rule_also_sees_failed_calls() -> None:
    result = await run_step("""
        workflow:
          - step: start
            tool: {kind: http, url: http://api/x}
            case:
              - when: "{{ event.name == 'call.done' and error is not none and error.status == 503 }}"
                then:
                  result: {from: "response.why"}
    """, ScriptedHttp(flaky(1)))
    assert result.ok
    assert result.result == "busy"


def test_backoff_multiplier_grows_each_wait() -> None:
    (task,) = parse("""
        workflow:
          - step: start
            tool: {kind: http, url: http://x}
            case:
              - when: "{{ event.name == 'call.error' }}"
                then:
                  retry: {max_attempts: 4, initial_delay: 0.5, backoff_multiplier: 3}
    """).step("start").tasks
    rule = task.rules[0]
    assert [backoff_delay(rule, n) for n in (1, 2, 3)] == [0.5, 1.5, 4.5]


def test_case_views_give_the_body_with_the_status_code_beside_it() -> None:
    ok = case_views(Outcome.success({"a": 1}, http={"status": 201, "headers": {}}))
    assert ok["response"] == {"status_code": 201, "a": 1}
    own = case_views(Outcome.success({"status_code": "x"}, http={"status": 200, "headers": {}}))
    assert own["response"] == {"status_code": "x"}
    assert ok["this"]["status"] == "ok"


def refused(call: TaskCall) -> Outcome:
    return Outcome.failure("connection refused", "connection", retryable=True)


async def test_pipeline_call_done_rule_that_ignores_the_error_does_not_swallow_it() -> None:
    # The second rule is true after a failed call too (`not response...` of a missing body), but
    # it does not read the failure, so the call's error fails the step.
    tool = ScriptedHttp(refused)
    result = await run_step(PAGINATE.replace("{{ event.name == 'call.done' }}",
                                             "{{ event.name == 'call.done' and not response }}"),
                            tool, ctx={"pages": []})
    assert not result.ok
    assert result.error is not None and "connection refused" in result.error["message"]
    assert len(tool.calls) == 1


async def test_pipeline_call_done_rule_that_reads_the_error_handles_it() -> None:
    body = PAGINATE.replace("{{ event.name == 'call.done' }}",
                            "{{ event.name == 'call.done' and error is not none }}")
    result = await run_step(body, ScriptedHttp(refused), ctx={"pages": []})
    assert result.ok
    assert result.route is not None
