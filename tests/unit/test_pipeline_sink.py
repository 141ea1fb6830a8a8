"""The worker side of `sink`: a sink reads the call's result as `result` / `data` / `this`,
leaves the step's result as it was, publishes `sink.*` events, and fails the step when it fails
(recording tools, no database)."""

from __future__ import annotations

from typing import Any

from unit_helpers import parse

from noetl_stream.messages import Command
from noetl_stream.tools.base import Outcome, TaskCall
from noetl_stream.tools.registry import ToolRegistry
from noetl_stream.worker.pipeline import Pipeline, PipelineResult


class Recording:
    """A tool that answers with `reply` and remembers every call."""

    def __init__(self, kind: str, reply: Outcome) -> None:
        self.kind = kind
        self.reply = reply
        self.calls: list[TaskCall] = []

    async def run(self, call: TaskCall) -> Outcome:
        self.calls.append(call)
        return self.reply

    async def close(self) -> None:
        return None


async def run_step(body: str, *tools: Recording,
                   events: list[dict[str, Any]] | None = None) -> PipelineResult:
    step = parse(body).step("start")
    command = {"execution_id": "e1", "step": "start", "step_run_id": "e1.start.1",
               "tasks": [t.model_dump(mode="json") for t in step.tasks],
               "context": {"workload": {}, "ctx": {}, "args": {}, "iter": {}}}

    async def publish(event_type: str, msg_id: str, body: dict[str, Any]) -> None:
        if events is not None:
            events.append({**body, "msg_id": msg_id})

    return await Pipeline(Command.model_validate(command), ToolRegistry({t.kind: t for t in tools}),
                          idempotency_prefix="e1.start.1:None", on_event=publish).run()


async def test_step_sink_stores_the_result_and_leaves_it_unchanged() -> None:
    http = Recording("http", Outcome.success({"id": 7, "name": "a"},
                                             http={"status": 200, "headers": {}}))
    db = Recording("duckdb", Outcome.success({"affected_rows": 1}))
    events: list[dict[str, Any]] = []
    result = await run_step("""
        workflow:
          - step: start
            tool: {kind: http, url: http://api}
            sink:
              kind: duckdb
              table: items
              args: {id: "{{ result.id }}", doc: "{{ data }}", status: "{{ this.status }}"}
    """, http, db, events=events)
    assert result.ok and result.result == {"id": 7, "name": "a"}
    assert result.http == {"status": 200, "headers": {}}
    (call,) = db.calls
    assert call.config["params"] == {"id": 7, "doc": {"id": 7, "name": "a"}, "status": "ok"}
    assert [(e["event_type"], e["task"]) for e in events] == [
        ("sink.started", "start_sink"), ("sink.processed", "start_sink")]
    assert events[1]["status"] == "ok" and events[1]["affected_rows"] == 1


async def test_step_sink_when_false_skips_the_sink() -> None:
    python = Recording("python", Outcome.success([]))
    db = Recording("duckdb", Outcome.success({"affected_rows": 0}))
    events: list[dict[str, Any]] = []
    result = await run_step("""
        workflow:
          - step: start
            tool: {kind: python, code: "result = []"}
            sink: {kind: duckdb, command: "SELECT 1", when: "{{ result | length > 0 }}"}
    """, python, db, events=events)
    assert result.ok and result.result == []
    assert db.calls == []
    assert [e["event_type"] for e in events] == ["sink.skipped"]


async def test_a_failed_sink_fails_the_step() -> None:
    python = Recording("python", Outcome.success({"id": 1}))
    db = Recording("postgres", Outcome.failure("relation \"t\" does not exist", "postgres"))
    result = await run_step("""
        workflow:
          - step: start
            tool: {kind: python, code: "result = 1"}
            sink: {kind: postgres, table: t, args: {id: "{{ result.id }}"}}
    """, python, db)
    assert not result.ok and result.error is not None
    assert result.error["task"] == "start_sink"
    assert 'task "start_sink" (postgres) failed: relation "t" does not exist' in result.error["message"]


class Paging(Recording):
    """An HTTP stand-in that answers page n on its n-th call."""

    async def run(self, call: TaskCall) -> Outcome:
        self.calls.append(call)
        return Outcome.success({"page": len(self.calls)}, http={"status": 200, "headers": {}})


async def test_case_sink_runs_each_time_its_rule_fires_and_only_then() -> None:
    http = Paging("http", Outcome.success(None))
    db = Recording("duckdb", Outcome.success({"affected_rows": 1}))
    events: list[dict[str, Any]] = []
    result = await run_step("""
        workflow:
          - step: start
            tool: {kind: http, url: http://api}
            case:
              - when: "{{ event.name == 'call.done' and response.page < 3 }}"
                then:
                  sink: {kind: duckdb, table: pages, args: {page: "{{ result.page }}"}}
                  call: {params: {page: "{{ response.page + 1 }}"}}
              - when: "{{ event.name == 'call.error' }}"
                then:
                  sink: {kind: duckdb, command: "SELECT 'never'"}
    """, http, db, events=events)
    assert result.ok and result.result == {"page": 3}
    assert [c.config["params"] for c in db.calls] == [{"page": 1}, {"page": 2}]
    assert [c.idempotency_key for c in db.calls] == [
        "e1.start.1:None:start_case0_sink:1", "e1.start.1:None:start_case0_sink:1:s2"]
    sink_events = [e for e in events if e["event_type"].startswith("sink.")]
    assert [e["event_type"] for e in sink_events] == ["sink.started", "sink.processed"] * 2
    assert len({e["msg_id"] for e in sink_events}) == 4
