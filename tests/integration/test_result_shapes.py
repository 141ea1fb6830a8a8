"""NoETL's result shapes and error kinds against real services: the http tool's error kinds on a
real local HTTP server, retry rules keyed on `output.error.kind`, `output.data.data` in a step's
`set:` and arcs, postgres `command_<i>`, loop `stats`, and `credential:` as the older `auth:`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from plain_client import EventFeed, PlainClient

from local_http import HttpService
from noetl_stream.bus.connection import Bus
from noetl_stream.bus.nats_server import free_port
from noetl_stream.state.credentials import CredentialStore
from noetl_stream.state.crypto import ENV_SECRET_KEY, SecretBox
from noetl_stream.tools.base import Outcome, TaskCall
from noetl_stream.tools.http import HttpTool

pytestmark = pytest.mark.integration

HEADER = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata:\n  name: shapes\n"


async def get(tool: HttpTool, url: str, **config: Any) -> Outcome:
    call = TaskCall(execution_id="e1", step="s", task="t", kind="http",
                    config={"url": url, **config}, input={}, spec={},
                    idempotency_key="e1.s.1:None:t:1")
    return await tool.run(call)


# -- error kinds -----------------------------------------------------------------------------------

@pytest.mark.parametrize(("status", "kind", "retryable"), [
    (500, "server_error", True), (429, "rate_limit", True), (401, "auth", False),
    (403, "auth", False), (404, "not_found", False), (400, "client_error", False),
])
async def test_error_reply_kind_is_noetls_class_with_the_status_beside_it(
        http_tool: HttpTool, http_service: HttpService, status: int, kind: str,
        retryable: bool) -> None:
    outcome = await get(http_tool, f"{http_service.url}/status/{status}/k")

    assert not outcome.ok and outcome.error is not None
    assert outcome.error["kind"] == kind
    assert outcome.error["retryable"] is retryable
    assert outcome.error["status"] == outcome.error["status_code"] == status
    assert outcome.error["http_status"] == status
    assert outcome.error["code"] == f"HTTP_{status}"
    assert outcome.error["body"] == {"error": status, "calls": 1}
    assert outcome.http is not None and outcome.http["status"] == status


async def test_rate_limit_carries_retry_after(http_tool: HttpTool,
                                              http_service: HttpService) -> None:
    outcome = await get(http_tool, f"{http_service.url}/status/429/k")

    assert outcome.error is not None and outcome.error["retry_after"] == 1


async def test_connection_refused_is_kind_connection(http_tool: HttpTool) -> None:
    outcome = await get(http_tool, f"http://127.0.0.1:{free_port()}/closed")

    assert outcome.error is not None
    assert (outcome.error["kind"], outcome.error["code"]) == ("connection", "CONN_REFUSED")
    assert outcome.error["retryable"] is True
    assert "status" not in outcome.error


async def test_a_reply_slower_than_the_timeout_is_kind_timeout(http_tool: HttpTool,
                                                               http_service: HttpService) -> None:
    outcome = await get(http_tool, f"{http_service.url}/slow?s=1.5", timeout=0.2)

    assert outcome.error is not None
    assert (outcome.error["kind"], outcome.error["code"]) == ("timeout", "CONN_TIMEOUT")
    assert outcome.error["retryable"] is True
    assert "timed out after 0.2s" in outcome.error["message"]


# -- through the stack ------------------------------------------------------------------------------

RETRY_ON_KIND = HEADER + """\
workload:
  code: 503
  times: 1
workflow:
  - step: start
    tool:
      kind: http
      url: "{{ workload.url }}/status/{{ workload.code }}/{{ workload.key }}?times={{ workload.times }}"
      spec:
        policy:
          rules:
            - when: "{{ output.error.kind == 'server_error' }}"
              then: {do: retry, attempts: 3}
            - when: "{{ output.error.kind == 'rate_limit' }}"
              then: {do: retry, attempts: 2}
"""


def step_failed(feed: EventFeed, step: str) -> dict[str, Any]:
    final = feed.final
    assert final["event_type"] == "execution.failed", final
    assert final["steps"][step]["status"] == "failed"
    (failed,) = [e for e in feed.of("step.failed") if e["step"] == step]
    return dict(failed["error"])


@pytest.mark.usefixtures("services")
async def test_retry_rule_on_output_error_kind_fires_for_server_errors(
        client: PlainClient, http_service: HttpService) -> None:
    feed = await client.run("kind-retry-1", RETRY_ON_KIND,
                            payload={"url": http_service.url, "key": "a", "times": 2})

    assert feed.final["event_type"] == "execution.completed", feed.final
    assert feed.final["result"] == {"key": "a", "calls": 3}
    assert http_service.calls["a"] == 3


@pytest.mark.usefixtures("services")
async def test_retry_rule_on_rate_limit_gives_up_after_its_attempts(
        client: PlainClient, http_service: HttpService) -> None:
    feed = await client.run("kind-retry-2", RETRY_ON_KIND,
                            payload={"url": http_service.url, "key": "b", "code": 429, "times": 5})

    error = step_failed(feed, "start")
    assert (error["kind"], error["status"]) == ("rate_limit", 429)
    assert http_service.calls["b"] == 2
    assert feed.final["error"]["step"] == "start"


@pytest.mark.usefixtures("services")
@pytest.mark.parametrize(("code", "kind"), [(404, "not_found"), (401, "auth"),
                                            (400, "client_error")])
async def test_client_errors_are_not_retried_by_a_server_error_rule(
        client: PlainClient, http_service: HttpService, code: int, kind: str) -> None:
    feed = await client.run(f"kind-noretry-{code}", RETRY_ON_KIND,
                            payload={"url": http_service.url, "key": f"c{code}", "code": code})

    error = step_failed(feed, "start")
    assert (error["kind"], error["status_code"]) == (kind, code)
    assert 'task "start_task" (http) failed' in error["message"]
    assert http_service.calls[f"c{code}"] == 1


ENVELOPE_READS = HEADER + """\
workflow:
  - step: start
    tool:
      kind: http
      url: "{{ workload.url }}/items"
      params: {page: 1, size: 3}
    set:
      ctx.page: "{{ output.data.data.page }}"
      ctx.seen: "{{ output.data.data['items'] | length }}"
      ctx.code: "{{ output.status_code }}"
      ctx.kind: "{{ output.headers['Content-Type'] }}"
    next:
      spec: {mode: exclusive}
      arcs:
        - step: more
          when: "{{ output.data.data.next_page == 2 and output.data.status_code == 200 }}"
        - step: last
  - step: more
    tool:
      kind: noop
      input:
        page: "{{ ctx.page }}"
        seen: "{{ ctx.seen }}"
        code: "{{ ctx.code }}"
        kind: "{{ ctx.kind }}"
        body_next: "{{ start.body.next_page }}"
        data_first: "{{ start.data['items'][0].id }}"
  - step: last
    tool: {kind: noop}
"""


@pytest.mark.usefixtures("services")
async def test_step_set_and_arc_when_read_output_data_data(client: PlainClient,
                                                           http_service: HttpService) -> None:
    feed = await client.run("envelope-1", ENVELOPE_READS, payload={"url": http_service.url})

    final = feed.final
    assert final["event_type"] == "execution.completed", final
    assert final["steps"]["more"]["result"] == {
        "page": 1, "seen": 3, "code": 200, "kind": "application/json; charset=utf-8",
        "body_next": 2, "data_first": 1}
    assert final["steps"].get("last", {}).get("runs", 0) == 0
    # The stored result is the body alone: the envelope is read, never stored.
    assert final["steps"]["start"]["result"] == {"page": 1, "next_page": 2,
                                                 "items": [{"id": 1}, {"id": 2}, {"id": 3}]}


LOOP_STATS = HEADER + """\
workflow:
  - step: start
    loop:
      in: "{{ workload.ids }}"
      iterator: item
    tool:
      kind: python
      input: {n: "{{ iter.item }}"}
      code: |
        result = {"id": n}
    next:
      arcs:
        - step: report
          when: "{{ start.stats.total == 3 and output.data.stats.success == 3 }}"
  - step: report
    tool:
      kind: python
      input:
        loop: "{{ start }}"
        total: "{{ start.stats.total }}"
        failed: "{{ start.stats.failed }}"
      code: |
        result = {"total": total, "failed": failed, "stats": loop.get("stats"),
                  "count": loop.get("count"), "ids": [r["id"] for r in loop.get("results")]}
"""


@pytest.mark.usefixtures("services")
async def test_loop_result_answers_stats_in_templates_arcs_and_python_inputs(
        client: PlainClient) -> None:
    feed = await client.run("loop-stats-1", LOOP_STATS, payload={"ids": [4, 5, 6]})

    final = feed.final
    assert final["event_type"] == "execution.completed", final
    assert final["steps"]["report"]["result"] == {
        "total": 3, "failed": 0, "stats": {"total": 3, "success": 3, "failed": 0}, "count": 3,
        "ids": [4, 5, 6]}
    assert final["steps"]["start"]["result"] == [{"id": 4}, {"id": 5}, {"id": 6}]


PG_COMMANDS = HEADER + """\
workflow:
  - step: start
    tool:
      kind: postgres
      credential: pg_main
      command: |
        CREATE TABLE t (id int);
        INSERT INTO t VALUES (1), (2);
        SELECT count(*)::int AS n FROM t;
    next:
      arcs:
        - step: one
          when: "{{ output.command_2.rows[0].n == 2 and start.command_1.row_count == 2 }}"
  - step: one
    tool:
      kind: postgres
      credential: pg_main
      query: "SELECT id FROM t ORDER BY id"
    next: [check]
  - step: check
    tool:
      kind: python
      input:
        created: "{{ start.command_0.status }}"
        inserted: "{{ start.command_1.row_count }}"
        counted: "{{ start.command_2.rows[0].n }}"
        rows: "{{ start.rows }}"
        first: "{{ one.command_0.rows[0].id }}"
        single_count: "{{ one.command_0.row_count }}"
      code: |
        result = dict(created=created, inserted=inserted, counted=counted, rows=rows,
                      first=first, single_count=single_count)
"""


@pytest.fixture
def no_env_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_SECRET_KEY, raising=False)


async def store_credential(bus: Bus, home: Path, name: str, kind: str,
                           data: dict[str, Any]) -> None:
    await (await CredentialStore.open(bus.js, SecretBox.from_env(home))).set(name, kind, data)


@pytest.mark.usefixtures("services", "no_env_key")
async def test_postgres_statements_read_as_command_i_through_a_credential_field(
        client: PlainClient, bus: Bus, noetl_home: Path, pg_dsn: str) -> None:
    await store_credential(bus, noetl_home, "pg_main", "postgres", {"dsn": pg_dsn})
    feed = await client.run("pg-commands-1", PG_COMMANDS)

    final = feed.final
    assert final["event_type"] == "execution.completed", final
    assert final["steps"]["check"]["result"] == {
        "created": "success", "inserted": 2, "counted": 2, "rows": [{"n": 2}], "first": 1,
        "single_count": 2}
    # Only the earlier statements are stored beside the last one's payload.
    assert final["steps"]["start"]["result"] == {
        "columns": ["n"], "rows": [{"n": 2}], "row_count": 1, "statement_count": 3,
        "command_0": {"affected_rows": 0}, "command_1": {"affected_rows": 2}}


@pytest.mark.usefixtures("services", "no_env_key")
async def test_http_credential_field_presents_the_stored_credential(
        client: PlainClient, bus: Bus, noetl_home: Path, http_service: HttpService) -> None:
    await store_credential(bus, noetl_home, "api_token", "bearer", {"token": "t-123"})
    playbook = HEADER + f"""\
workflow:
  - step: start
    tool: {{kind: http, url: "{http_service.url}/echo", credential: api_token}}
"""
    feed = await client.run("http-credential-1", playbook)

    assert feed.final["event_type"] == "execution.completed", feed.final
    assert feed.final["result"]["headers"]["Authorization"] == "Bearer t-123"
