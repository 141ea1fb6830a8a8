"""The marks a state keeps of the NOETL_EVENTS sequences it applied (server/source_copies.py),
on a real nats-server: they are committed with the events' effects, so a group whose commit
loses a revision check leaves them as they were and its events are applied again from the
reloaded state, not skipped."""

from __future__ import annotations

from typing import Any

import pytest
from plain_client import PlainClient

from noetl_stream.bus.connection import Bus
from noetl_stream.server import server as server_module
from noetl_stream.server.replay import applied_events
from noetl_stream.server.retention import EXECUTIONS_BUCKET
from noetl_stream.server.verify import committed_state, read_log, verify
from noetl_stream.services import run_services
from noetl_stream.state.results import ResultStore
from noetl_stream.state.step_results import StepResults
from playbook_files import read_playbook

pytestmark = pytest.mark.integration

THREE_NOOPS = read_playbook("integration", "three_noops.yaml")


async def test_a_commit_that_loses_its_revision_check_leaves_the_marks_as_they_were(
        bus: Bus, client: PlainClient, monkeypatch: pytest.MonkeyPatch) -> None:
    execution_id = "marks1"
    commit = server_module.Server._commit
    kv = await bus.js.key_value(EXECUTIONS_BUCKET)
    moved: list[list[int]] = []

    async def conflicting_commit(self: Any, eid: str, data: bytes, state: Any, last: int) -> int:
        if eid == execution_id and state.applied == 2 and not moved:
            # Another writer moves the state first: this commit fails its revision check after
            # the group set the marks on the cached state.
            moved.append(list(state.source_recent))
            entry = await kv.get(eid)
            await kv.update(eid, entry.value or b"", last=int(entry.revision or 0))
        return await commit(self, eid, data, state, last)

    monkeypatch.setattr(server_module.Server, "_commit", conflicting_commit)
    async with run_services(bus):
        feed = await client.run(execution_id, THREE_NOOPS)
    assert feed.final["status"] == "completed", feed.final
    assert moved and len(moved[0]) == 2, moved  # the lost commit had marked two events

    state = await committed_state(bus, execution_id, StepResults(bus.js, ResultStore(bus.js)))
    assert state is not None
    events = applied_events(await read_log(bus, execution_id), bus.topology)
    # Each event applied once: the one of the lost commit was applied again, not skipped.
    assert state.applied == len(events) == 3
    assert len(state.source_recent) == len(set(state.source_recent)) == 3
    assert state.source_mark[0] == max(state.source_recent)
    assert (await verify(bus, execution_id)).outcome == "equal"
