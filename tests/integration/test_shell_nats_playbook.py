"""A playbook that runs a command and keeps its output in NATS, through the real server and worker."""

from __future__ import annotations

from typing import Any

import pytest

from noetl_stream.bus.connection import Bus
from noetl_stream.services import run_services, submit_and_watch
from playbook_files import read_playbook

pytestmark = pytest.mark.integration

SHELL_TO_KV = read_playbook("integration", "shell_nats_to_kv.yaml")


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


FAILING_COMMAND = read_playbook("integration", "shell_nats_failing_command.yaml")


async def test_playbook_with_a_failing_command_fails_with_its_exit_code(bus: Bus) -> None:
    async with run_services(bus, python_children=1):
        final = await submit_and_watch(bus, playbook_text=FAILING_COMMAND, playbook_file="f.yaml",
                                       payload={}, on_event=lambda e: None, timeout_s=30)

    assert final["status"] == "failed"
    assert "exited with code 3" in str(final["error"])
    assert "no space left" in str(final["error"])
