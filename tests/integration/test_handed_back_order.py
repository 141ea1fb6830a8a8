"""A group handed back for redelivery lets the execution's later events go first, on a real
nats-server: a copy of an outcome stored before the execution's last outcome comes again after
the execution ended and counts for nothing. `verify` rebuilds the state in the order the server
applied the events (server/applied_order.py), so the committed state is what its events say."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from nats.js.errors import NotFoundError
from plain_client import PlainClient

from noetl_stream.bus.connection import Bus
from noetl_stream.bus.event_feed import EVENTS_STREAM
from noetl_stream.server import server as server_module
from noetl_stream.server.verify import committed_state, verify
from noetl_stream.services import run_services
from noetl_stream.state.results import ResultStore
from noetl_stream.state.step_results import StepResults

pytestmark = pytest.mark.integration

PLAYBOOK = """
apiVersion: noetl.io/v2
kind: Playbook
metadata:
  name: handed-back
workflow:
  - step: start
    tool: {kind: noop}
    next: [{step: after}]
  - step: after
    tool:
      kind: python
      code: |
        import time
        time.sleep(1.0)
        result = 2
"""
COPY = "Test-Copy"  # marks the outcome copied again, on its NOETL_ROUTER copy too


async def _stored_outcome(bus: Bus, subject: str, timeout_s: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return await bus.js.get_last_msg(EVENTS_STREAM, subject)
        except NotFoundError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)


async def test_an_outcome_copy_handed_back_past_the_last_outcome_verifies_equal(
        bus: Bus, client: PlainClient, monkeypatch: pytest.MonkeyPatch) -> None:
    execution_id = "handedback1"
    commit_group = server_module.Server._commit_group
    handed_back: list[str] = []

    async def commit_failing_once(self: Any, eid: str, items: list[Any]) -> None:
        if not handed_back and any((m.headers or {}).get(COPY) for m, _ in items):
            # The last outcome comes while this group is applied, then the commit times out:
            # the group is handed back and the last outcome is applied first.
            deadline = time.monotonic() + 20
            while not self._waiting.get(eid):
                assert time.monotonic() < deadline, "the last outcome never came"
                await asyncio.sleep(0.02)
            handed_back.append(eid)
            raise TimeoutError("the commit timed out")
        await commit_group(self, eid, items)

    monkeypatch.setattr(server_module.Server, "_commit_group", commit_failing_once)
    results = StepResults(bus.js, ResultStore(bus.js))
    async with run_services(bus):
        feed = await client.follow(execution_id)
        await client.publish_request({"execution_id": execution_id, "playbook": PLAYBOOK})
        first = await _stored_outcome(bus, f"noetl.events.{execution_id}.step.done.default")
        # As if re-published beyond the duplicate window: a new msg id, the same outcome.
        await bus.js.publish(first.subject, first.data,
                             headers={"Nats-Msg-Id": "copied-again:1", COPY: "1"})
        await asyncio.wait_for(feed.ended.wait(), 30)
        deadline = time.monotonic() + 20
        while True:  # the copy comes again after its nak delay, to an ended execution
            state = await committed_state(bus, execution_id, results)
            assert state is not None
            if len(state.source_recent) == 3 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)

    assert handed_back == [execution_id]
    assert feed.final["status"] == "completed", feed.final
    assert state.status == "completed" and state.applied == 2
    # Applied in this order: the first outcome, the last one, then the copy.
    assert len(state.source_recent) == 3 and state.source_recent[1] > state.source_recent[2]
    verdict = await verify(bus, execution_id)
    assert verdict.outcome == "equal", verdict.detail
