"""NoETL's forms (its filters, `cmds:`, `timeout_seconds:`, `.result`) through the real server and
worker on NATS.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from api_client import running_api

from local_http import HttpService
from noetl_stream.bus.connection import Bus
from noetl_stream.services import run_services, submit_and_watch

pytestmark = pytest.mark.integration

SHELL_CMDS = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: noetl-forms, path: tests/noetl-forms}
workload: {user: alice, password: s3cret}
workflow:
  - step: start
    tool:
      kind: shell
      timeout_seconds: 20
      cmds:
        - echo "user {{ workload.user }}"
        - |
          echo second >&2
          echo "{{ (workload.user ~ ':' ~ workload.password) | b64encode }}"
    next:
      # Rendered by the router: the same filters and `.result` there.
      - step: check
        when: "{{ (start.result.commands | len) == 2 and (workload.user | b64encode) == 'YWxpY2U=' }}"
  - step: check
    tool:
      kind: noop
      args:
        commands: "{{ start.result.commands | len }}"
        code: "{{ start.result.returncode | int }}"
        basic: "{{ (start.result.stdout | trim).split('\\n') | last | b64decode }}"
        parsed: "{{ '{\\"k\\": [1, 2]}' | fromjson | d({}) }}"
        not_a_number: "{{ start.stderr | int }}"
    next:
      - step: end
  - step: end
"""

FAILING_CMDS = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: noetl-forms-fail}
workflow:
  - step: start
    tool:
      kind: shell
      cmds:
        - echo before
        - exit 7
        - echo never
"""


async def test_shell_cmds_and_noetl_filters_run_through_server_and_worker(bus: Bus) -> None:
    async with run_services(bus, python_children=1):
        final = await submit_and_watch(bus, playbook_text=SHELL_CMDS, playbook_file="forms.yaml",
                                       payload={}, on_event=lambda e: None, timeout_s=60)

    assert final["status"] == "completed", final.get("error")
    start = final["steps"]["start"]["result"]
    assert start["stdout"] == "user alice\n\nYWxpY2U6czNjcmV0\n"
    assert start["stderr"] == "second\n"
    assert [c["returncode"] for c in start["commands"]] == [0, 0]
    assert final["steps"]["check"]["result"] == {
        "commands": 2, "code": 0, "basic": "alice:s3cret", "parsed": {"k": [1, 2]},
        "not_a_number": 0}


async def test_shell_cmds_stop_at_the_first_failure_and_fail_the_step(bus: Bus) -> None:
    async with run_services(bus, python_children=1):
        final = await submit_and_watch(bus, playbook_text=FAILING_CMDS, playbook_file="f.yaml",
                                       payload={}, on_event=lambda e: None, timeout_s=60)

    assert final["status"] == "failed"
    assert "command 2 of 3 ('exit 7') exited with code 7" in final["error"]["message"]
    assert final["error"]["stdout"] == "before\n"
    assert [c["returncode"] for c in final["error"]["commands"]] == [0, 7]


async def test_http_timeout_seconds_bounds_the_request(bus: Bus, http_service: HttpService) -> None:
    playbook = f"""\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: http-timeout-seconds}}
workflow:
  - step: start
    tool:
      kind: http
      url: "{http_service.url}/slow"
      params: {{s: 20}}
      timeout_seconds: 1
"""
    started = time.monotonic()
    async with run_services(bus, python_children=1):
        final = await submit_and_watch(bus, playbook_text=playbook, playbook_file="h.yaml",
                                       payload={}, on_event=lambda e: None, timeout_s=60)

    assert final["status"] == "failed"
    assert final["error"]["kind"] == "timeout", final["error"]
    assert time.monotonic() - started < 15


SECRET_RESULT = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: redacted-result}
workflow:
  - step: start
    tool:
      kind: python
      code: |
        result = {"user": "alice", "db_password": "hunter2-long", "note": "Bearer abcdefgh123",
                  "rows": [{"api_key": "k-123456789"}]}
    next:
      - step: read
  - step: read
    tool:
      kind: noop
      args:
        user: "{{ start.user }}"
        password: "{{ start.db_password }}"
"""


async def test_secret_named_fields_are_redacted_in_stored_results(
        bus: Bus, monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[dict[str, Any]] = []
    monkeypatch.setenv("NOETL_STREAM_REDACT_RESULTS", "1")
    async with run_services(bus, python_children=1):
        final = await submit_and_watch(bus, playbook_text=SECRET_RESULT, playbook_file="r.yaml",
                                       payload={}, on_event=events.append, timeout_s=60)

    assert final["status"] == "completed", final.get("error")
    assert final["steps"]["start"]["result"] == {
        "user": "alice", "db_password": "[REDACTED]", "note": "[REDACTED]",
        "rows": [{"api_key": "[REDACTED]"}]}
    # The next step reads the stored result, as on NoETL; its own `password` key is redacted too.
    assert final["steps"]["read"]["result"] == {"user": "alice", "password": "[REDACTED]"}
    assert "hunter2-long" not in str(events)


async def test_results_are_stored_as_returned_unless_redaction_is_asked_for(bus: Bus) -> None:
    async with run_services(bus, python_children=1):
        final = await submit_and_watch(bus, playbook_text=SECRET_RESULT, playbook_file="r.yaml",
                                       payload={}, on_event=lambda event: None, timeout_s=60)

    assert final["status"] == "completed", final.get("error")
    assert final["steps"]["start"]["result"]["db_password"] != "[REDACTED]"


SCRIPT_SOURCE_CODE = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: script-source-code}
workload:
  test_code: |
    result = {"message": "Script loading works!", "doubled": n * 2}
workflow:
  - step: start
    tool:
      kind: python
      script:
        uri: inline
        source:
          type: inline
          code: "{{ test_code }}"
      input: {n: 21}
"""


async def test_python_script_source_code_runs_as_the_tasks_code(bus: Bus) -> None:
    async with run_services(bus, python_children=1):
        final = await submit_and_watch(bus, playbook_text=SCRIPT_SOURCE_CODE, playbook_file="s.yaml",
                                       payload={}, on_event=lambda e: None, timeout_s=60)

    assert final["status"] == "completed", final.get("error")
    assert final["result"] == {"message": "Script loading works!", "doubled": 42}


SUBSCRIPTION = """\
apiVersion: noetl.io/v1
kind: Subscription
metadata: {name: api_orders, path: tests/subscriptions/api_orders}
spec:
  source: nats
  mode: pull
  stream: ORDERS
  dispatch: {playbook: tests/handle_order}
"""


async def test_the_catalog_api_registers_lists_and_reads_a_subscription_and_runs_none(
        bus: Bus) -> None:
    async with run_services(bus, python_children=1), running_api(bus, auth=False) as api:
        status, registered = await api.call("POST", "/api/catalog",
                                            json={"content": SUBSCRIPTION})
        assert status == 201, registered
        assert registered["path"] == "tests/subscriptions/api_orders"
        assert registered["warnings"] == [
            "a Subscription: register stores it and the catalog lists it; `run` starts none "
            "(`trigger apply` runs one whose form maps onto a trigger)"]
        status, catalog = await api.call("GET", "/api/catalog")
        assert status == 200
        assert {"path": "tests/subscriptions/api_orders", "latest": registered["playbook_id"],
                "versions": {}} in catalog["items"]
        status, read = await api.call("GET", "/api/catalog/tests/subscriptions/api_orders")
        assert status == 200 and read["content"] == SUBSCRIPTION and read["name"] == "api_orders"

        status, started = await api.call("POST", "/api/executions",
                                         json={"path": "tests/subscriptions/api_orders"})
        assert status == 422, started
        assert "`run` starts no execution from it" in str(started)

        bad = SUBSCRIPTION.replace("mode: pull", "mode: sideways")
        status, refused = await api.call("POST", "/api/catalog", json={"content": bad})
        assert status == 422
        assert "'mode' must be one of pull, push" in str(refused)
