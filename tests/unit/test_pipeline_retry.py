"""The worker side of the `retry:` clause and `poll:`: guards over the retry context, chain
scope, jittered waits fixed by the idempotency key, the max_delay cap, poll rounds and deadline,
and the retry.* / poll.* events with their stable action ids (no network, no sleeping: waits are
recorded instead)."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from unit_helpers import parse

from noetl_stream import ids
from noetl_stream.dsl.models import Rule
from noetl_stream.messages import Command
from noetl_stream.tools.base import Outcome, TaskCall
from noetl_stream.tools.registry import ToolRegistry
from noetl_stream.worker.pipeline import Pipeline, PipelineResult
from noetl_stream.worker.retrying import backoff_delay


class Scripted:
    """A tool whose reply is chosen from the call and the count of calls so far per task."""

    def __init__(self, kind: str, reply: Callable[[TaskCall, int], Outcome]) -> None:
        self.kind = kind
        self.reply = reply
        self.calls: list[TaskCall] = []

    async def run(self, call: TaskCall) -> Outcome:
        self.calls.append(call)
        return self.reply(call, sum(1 for c in self.calls if c.task == call.task))

    async def close(self) -> None:
        return None


def flaky(failures: int, status: int = 503) -> Callable[[TaskCall, int], Outcome]:
    def reply(call: TaskCall, n: int) -> Outcome:
        if n <= failures:
            return Outcome.failure(f"HTTP {status}", "http", status=status,
                                   http={"status": status, "headers": {}})
        return Outcome.success({"n": n}, http={"status": 200, "headers": {}})
    return reply


class SteppedClock:
    """A clock that records every wait the pipeline asks for and never moves on its own."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    def monotonic(self) -> float:
        return 0.0

    async def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)


@pytest.fixture
def clock() -> SteppedClock:
    return SteppedClock()


@pytest.fixture
def waits(clock: SteppedClock) -> list[float]:
    """Every wait the pipeline asks for, instead of waiting."""
    return clock.waits


Events = list[tuple[str, str, dict[str, Any]]]
RunStep = Callable[..., Awaitable[PipelineResult]]


async def run_with_clock(clock: SteppedClock, body: str, tool: Scripted,
                         events: Events | None = None) -> PipelineResult:
    step = parse(body).step("start")
    command = {"execution_id": "e1", "step": "start", "step_run_id": "e1.start.1",
               "tasks": [t.model_dump(mode="json") for t in step.tasks],
               "context": {"workload": {}, "ctx": {}, "args": {}, "iter": {}}}

    async def sink(event_type: str, msg_id: str, body: dict[str, Any]) -> None:
        if events is not None:
            events.append((event_type, msg_id, body))

    return await Pipeline(Command.model_validate(command), ToolRegistry({tool.kind: tool}),
                          idempotency_prefix="e1.start.1:None", on_event=sink, clock=clock).run()


@pytest.fixture
def run_step(clock: SteppedClock) -> RunStep:
    """Run the step `start` of a playbook body with the test's clock."""
    return functools.partial(run_with_clock, clock)


HTTP_STEP = """
    workflow:
      - step: start
        tool: {kind: http, url: http://api}
        retry: %s
"""


async def test_retry_when_reads_status_code_and_attempt(waits: list[float], run_step: RunStep) -> None:
    tool = Scripted("http", flaky(2))
    result = await run_step(HTTP_STEP % "{max_attempts: 5, initial_delay: 1, backoff_multiplier: 2,"
                            " retry_when: '{{ status_code == 503 and attempt < max_attempts }}'}",
                            tool)
    assert result.ok and result.result == {"n": 3}
    assert [c.attempt for c in tool.calls] == [1, 2, 3]
    assert [c.idempotency_key for c in tool.calls] == [
        "e1.start.1:None:start_task:1", "e1.start.1:None:start_task:2",
        "e1.start.1:None:start_task:3"]
    assert waits == [1.0, 2.0]


async def test_retry_when_false_fails_at_once(waits: list[float], run_step: RunStep) -> None:
    tool = Scripted("http", flaky(2, status=404))
    result = await run_step(HTTP_STEP % "{retry_when: '{{ status_code == 503 }}'}", tool)
    assert not result.ok and result.error is not None and result.error["status"] == 404
    assert len(tool.calls) == 1 and waits == []


async def test_stop_when_fails_without_further_attempts(waits: list[float], run_step: RunStep) -> None:
    tool = Scripted("http", flaky(5))
    result = await run_step(HTTP_STEP % "{max_attempts: 5, stop_when: '{{ attempt >= 2 }}'}", tool)
    assert not result.ok
    assert len(tool.calls) == 2


async def test_stop_when_repeats_successful_calls_until_it_holds(
        waits: list[float], run_step: RunStep) -> None:
    tool = Scripted("http", flaky(0))
    result = await run_step(HTTP_STEP % "{max_attempts: 5, stop_when: '{{ result.n >= 3 }}'}", tool)
    assert result.ok and result.result == {"n": 3}


async def test_exhausted_retry_fails_with_the_last_error(waits: list[float], run_step: RunStep) -> None:
    tool = Scripted("http", flaky(9))
    result = await run_step(HTTP_STEP % "{max_attempts: 3}", tool)
    assert not result.ok and len(tool.calls) == 3
    assert result.error is not None and result.error["task"] == "start_task"


async def test_exhausted_clause_hands_the_outcome_to_the_rules_after_it(
        waits: list[float], run_step: RunStep) -> None:
    tool = Scripted("http", flaky(9))
    result = await run_step("""
        workflow:
          - step: start
            tool:
              kind: http
              url: http://api
              retry: {max_attempts: 2}
              spec:
                policy:
                  rules:
                    - when: "{{ outcome.status == 'error' }}"
                      then: {do: continue, set: {ctx.gave_up: true}}
    """, tool)
    assert result.ok and result.ctx_patch == {"gave_up": True}
    assert len(tool.calls) == 2


CHAIN = """
    workflow:
      - step: start
        retry: {scope: chain, max_attempts: 3, initial_delay: 1, backoff: linear}
        tool:
          - first: {kind: http, url: http://api/first}
          - second: {kind: http, url: http://api/second}
"""


async def test_chain_scope_reruns_the_pipeline_from_its_first_task(
        waits: list[float], run_step: RunStep) -> None:
    events: list[tuple[str, str, dict[str, Any]]] = []
    tool = Scripted("http", lambda call, n: flaky(2)(call, n) if call.task == "second"
                    else Outcome.success({"task": call.task, "n": n}))
    result = await run_step(CHAIN, tool, events)
    assert result.ok and result.result == {"n": 3}
    assert [(c.task, c.attempt) for c in tool.calls] == [
        ("first", 1), ("second", 1), ("first", 1), ("second", 1), ("first", 1), ("second", 1)]
    assert [c.idempotency_key.split(":", 2)[2] for c in tool.calls] == [
        "first:1", "second:1", "first:1:c2", "second:1:c2", "first:1:c3", "second:1:c3"]
    assert waits == [1.0, 2.0]
    chain_id = ids.action_id("e1.start.1", None, None)
    assert [(t, b["action_id"], b["attempt"], b.get("status")) for t, _, b in events] == [
        ("retry.started", chain_id, 2, None), ("retry.processed", chain_id, 2, "error"),
        ("retry.started", chain_id, 3, None), ("retry.processed", chain_id, 3, "ok")]
    assert events[0][2]["failed_task"] == "second"


async def test_chain_scope_gives_up_after_its_attempts(waits: list[float], run_step: RunStep) -> None:
    tool = Scripted("http", lambda call, n: flaky(9)(call, n) if call.task == "second"
                    else Outcome.success(n))
    result = await run_step(CHAIN, tool)
    assert not result.ok
    assert [c.task for c in tool.calls] == ["first", "second"] * 3


async def test_tool_retry_events_share_a_stable_action_id(waits: list[float], run_step: RunStep) -> None:
    first: list[tuple[str, str, dict[str, Any]]] = []
    second: list[tuple[str, str, dict[str, Any]]] = []
    await run_step(HTTP_STEP % "{max_attempts: 3}", Scripted("http", flaky(2)), first)
    await run_step(HTTP_STEP % "{max_attempts: 3}", Scripted("http", flaky(2)), second)
    action = ids.action_id("e1.start.1", None, "start_task")
    assert [(t, b["action_id"], b["attempt"], b.get("status")) for t, _, b in first] == [
        ("retry.started", action, 2, None), ("retry.processed", action, 2, "error"),
        ("retry.started", action, 3, None), ("retry.processed", action, 3, "ok")]
    assert first[1][2]["status_code"] == 503
    # A re-delivered command publishes the same message ids: the stream drops the copies.
    assert [m for _, m, _ in first] == [m for _, m, _ in second]
    assert len({m for _, m, _ in first}) == 4


def test_jitter_is_fixed_by_key_and_attempt_and_stays_in_its_band() -> None:
    rule = Rule(do="retry", backoff="exponential", delay=4.0, jitter=True)
    waits = [backoff_delay(rule, 2, f"run:task:{n}") for n in range(50)]
    assert waits == [backoff_delay(rule, 2, f"run:task:{n}") for n in range(50)]
    assert all(4.0 <= w <= 8.0 for w in waits)
    assert len(set(waits)) > 40
    assert backoff_delay(rule, 2, "k") != backoff_delay(rule, 3, "k") / 2
    assert backoff_delay(rule, 2) == 8.0  # no key, no jitter


def test_max_delay_caps_every_backoff_kind() -> None:
    for kind in ("exponential", "linear", "fixed"):
        rule = Rule(do="retry", backoff=kind, delay=10.0, max_delay=15.0, jitter=True)  # type: ignore[arg-type]
        assert all(backoff_delay(rule, n, "k") <= 15.0 for n in range(1, 10))
    assert backoff_delay(Rule(do="retry", backoff="exponential", delay=1, max_delay=5), 6) == 5.0


async def test_jittered_waits_repeat_on_a_replay(waits: list[float], run_step: RunStep) -> None:
    clause = "{max_attempts: 4, backoff: {type: exponential, delay_seconds: 2, jitter: true}}"
    await run_step(HTTP_STEP % clause, Scripted("http", flaky(3)))
    first = list(waits)
    waits.clear()
    await run_step(HTTP_STEP % clause, Scripted("http", flaky(3)))
    assert waits == first and len(first) == 3
    assert 1.0 <= first[0] <= 2.0 and 2.0 <= first[1] <= 4.0


POLL = """
    workflow:
      - step: start
        tool:
          kind: http
          url: http://api/status
          poll: %s
"""


def ready_after(rounds: int) -> Callable[[TaskCall, int], Outcome]:
    return lambda call, n: Outcome.success({"status": "ready" if n >= rounds else "pending", "n": n})


async def test_poll_reruns_until_the_guard_holds(waits: list[float], run_step: RunStep) -> None:
    events: list[tuple[str, str, dict[str, Any]]] = []
    tool = Scripted("http", ready_after(3))
    result = await run_step(POLL % "{until: \"{{ result.status == 'ready' }}\", interval: 2s}",
                            tool, events)
    assert result.ok and result.result == {"status": "ready", "n": 3}
    assert waits == [2.0, 2.0]
    assert [c.idempotency_key.split(":", 2)[2] for c in tool.calls] == [
        "start_task:1", "start_task:1:p2", "start_task:1:p3"]
    assert [(t, b.get("poll_attempt"), b.get("done")) for t, _, b in events] == [
        ("poll.started", None, None), ("poll.attempt", 1, False), ("poll.attempt", 2, False),
        ("poll.attempt", 3, True), ("poll.done", None, None)]
    assert len({m for _, m, _ in events}) == len(events)


async def test_poll_gives_up_after_max_attempts(waits: list[float], run_step: RunStep) -> None:
    events: list[tuple[str, str, dict[str, Any]]] = []
    tool = Scripted("http", ready_after(99))
    result = await run_step(POLL % "{until: \"{{ result.status == 'ready' }}\", max_attempts: 3}",
                            tool, events)
    assert not result.ok and result.error is not None
    assert result.error["kind"] == "poll_timeout" and "poll gave up" in result.error["message"]
    assert len(tool.calls) == 3
    assert events[-1][0] == "poll.timeout" and events[-1][2]["poll_attempts"] == 3


async def test_poll_gives_up_when_the_next_round_would_pass_the_deadline(
        waits: list[float], run_step: RunStep) -> None:
    tool = Scripted("http", ready_after(99))
    result = await run_step(POLL % "{until: '{{ result.status == \"ready\" }}', interval: 4,"
                            " deadline: 10}", tool)
    assert not result.ok and result.error is not None and result.error["kind"] == "poll_timeout"
    assert len(tool.calls) == 3 and waits == [4.0, 4.0]  # 0 s, 4 s, 8 s; 12 s is past 10 s


async def test_poll_rounds_are_retried_on_failure(waits: list[float], run_step: RunStep) -> None:
    def reply(call: TaskCall, n: int) -> Outcome:
        if n == 2:
            return Outcome.failure("HTTP 503", "http", status=503, http={"status": 503, "headers": {}})
        return Outcome.success({"status": "ready" if n >= 3 else "pending"})

    tool = Scripted("http", reply)
    result = await run_step("""
        workflow:
          - step: start
            tool:
              kind: http
              url: http://api/status
              retry: {max_attempts: 2}
              poll: {until: "{{ result.status == 'ready' }}"}
    """, tool)
    assert result.ok
    assert [c.idempotency_key.split(":", 2)[2] for c in tool.calls] == [
        "start_task:1", "start_task:1:p2", "start_task:2:p2"]


def failing_with(kinds: list[str]) -> Callable[[TaskCall, int], Outcome]:
    """Fails with the error kinds in order, then succeeds."""
    def reply(call: TaskCall, n: int) -> Outcome:
        if n <= len(kinds):
            return Outcome.failure(f"{kinds[n - 1]} failure", kinds[n - 1])
        return Outcome.success({"n": n})
    return reply


async def test_retry_on_retries_only_the_listed_error_kinds_in_either_spelling(
        waits: list[float], run_step: RunStep) -> None:
    listed = Scripted("http", failing_with(["timeout", "connection"]))
    other = Scripted("http", failing_with(["auth"]))
    clause = "{max_attempts: 3, retry_on: [timeout, connection_error], backoff: 2}"

    retried = await run_step(HTTP_STEP % clause, listed)
    refused = await run_step(HTTP_STEP % clause, other)

    assert retried.ok and retried.result == {"n": 3} and len(listed.calls) == 3
    assert not refused.ok and len(other.calls) == 1
    assert waits == [2.0, 2.0]


async def test_retry_on_status_retries_only_the_listed_statuses(
        waits: list[float], run_step: RunStep) -> None:
    busy = Scripted("http", flaky(1, status=503))
    missing = Scripted("http", flaky(1, status=404))
    clause = "{max_attempts: 2, retry_on_status: [429, 503]}"

    assert (await run_step(HTTP_STEP % clause, busy)).ok and len(busy.calls) == 2
    assert not (await run_step(HTTP_STEP % clause, missing)).ok and len(missing.calls) == 1
