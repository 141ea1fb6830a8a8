"""Two requests send the same playbook text under different files: the server parses the text
once for both, and a router-side template error still names each request's own file; `verify`
rebuilds each execution with the same message (real nats-server, server and worker)."""

from __future__ import annotations

import pytest

from noetl_stream.bus.connection import Bus
from noetl_stream.server.verify import verify
from noetl_stream.services import submit_and_watch

pytestmark = pytest.mark.integration

TEXT = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: file-names}
workflow:
  - step: start
    tool: {kind: noop}
    next: [{step: divide}]
  - step: divide
    tool: {kind: noop}
    set: {ctx.x: "{{ 1 / 0 }}"}
"""


async def test_a_template_error_names_the_file_of_each_request(bus: Bus, services: None) -> None:
    finals = []
    for file in ("first.yaml", "second.yaml"):
        finals.append(await submit_and_watch(bus, playbook_text=TEXT, playbook_file=file,
                                             payload={}, on_event=lambda _e: None, timeout_s=60))
    for file, other, final in (("first.yaml", "second.yaml", finals[0]),
                               ("second.yaml", "first.yaml", finals[1])):
        assert final["status"] == "failed", final
        message = str(final["steps"]["divide"]["error"]["message"])
        assert f"{file}:8:" in message and other not in message, message
        verdict = await verify(bus, final["execution_id"])
        assert verdict.outcome == "equal", verdict
