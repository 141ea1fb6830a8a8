"""A playbook that runs a command and keeps its output in NATS, through the real server and worker."""

from __future__ import annotations

from typing import Any

import pytest

from noetl_stream.runtime.connection import Bus
from noetl_stream.runtime.services import run_services, submit_and_watch

pytestmark = pytest.mark.integration

SHELL_TO_KV = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: shell-to-kv
workload:
  who: world
workflow:
  - step: start
    tool:
      kind: shell
      command: ["sh", "-c", "echo \\"hello $WHO\\"; echo note >&2"]
      env:
        WHO: "{{ workload.who }}"
    next: store
  - step: store
    tool:
      kind: nats
      operation: kv_put
      bucket: notes
      key: greeting
      value: "{{ start.stdout | trim }}"
    next: read
  - step: read
    tool:
      - get:
          kind: nats
          operation: kv_get
          bucket: notes
          key: greeting
      - count:
          kind: shell
          command: "printf '%s' '{{ get.value }}' | wc -c"
"""


async def test_playbook_runs_shell_and_keeps_its_output_in_nats_kv(bus: Bus) -> None:
    kv = await bus.js.create_key_value(bucket="notes")
    events: list[dict[str, Any]] = []

    async with run_services(bus, python_children=1):
        final = await submit_and_watch(bus, playbook_text=SHELL_TO_KV, playbook_file="shell-to-kv.yaml",
                                       payload={"who": "nats"}, on_event=events.append, timeout_s=30)

    assert final["status"] == "completed", final.get("error")
    assert final["steps"]["start"]["result"] == {"stdout": "hello nats\n", "stderr": "note\n",
                                                 "exit_code": 0}
    assert final["steps"]["store"]["result"]["revision"] == 1
    assert final["result"]["stdout"].strip() == str(len("hello nats"))
    assert (await kv.get("greeting")).value == b"hello nats"


FAILING_COMMAND = """\
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: shell-fails
workflow:
  - step: start
    tool:
      kind: shell
      command: "echo 'no space left' >&2; exit 3"
"""


async def test_playbook_with_a_failing_command_fails_with_its_exit_code(bus: Bus) -> None:
    async with run_services(bus, python_children=1):
        final = await submit_and_watch(bus, playbook_text=FAILING_COMMAND, playbook_file="f.yaml",
                                       payload={}, on_event=lambda e: None, timeout_s=30)

    assert final["status"] == "failed"
    assert "exited with code 3" in str(final["error"])
    assert "no space left" in str(final["error"])
