"""The admission service's sweep, with the real server and worker: a slot held by an execution
whose release never came (it ended, or it is gone) is given up, and the execution waiting for it
starts. No slot leaks, whatever was lost."""

from __future__ import annotations

import time

import pytest
from nats.js.errors import KeyNotFoundError

from noetl_stream.bus.connection import Bus
from noetl_stream.server.admission import SWEEP_S
from noetl_stream.services import submit_and_watch
from noetl_stream.state import concurrency_groups as groups
from noetl_stream.testing.waiting import assert_eventually

pytestmark = pytest.mark.integration

PLAYBOOK = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: swept, path: tests/swept}
executor:
  spec:
    concurrency: {limit: 1}
workflow:
  - step: start
    tool: {kind: python, code: "result = 'ran'"}
"""


@pytest.mark.timeout(90)
async def test_a_slot_whose_release_was_lost_is_swept_and_the_waiting_execution_starts(
        bus: Bus, services: None) -> None:
    kv = await bus.js.key_value(groups.BUCKET)
    ghost = groups.GroupRecord(group="tests/swept",
                               holders=[groups.Holder(id="ghost", since=time.time())])
    await kv.create(groups.key_of("tests/swept"), groups.encode(ghost))

    began = time.monotonic()
    final = await submit_and_watch(bus, playbook_text=PLAYBOOK, playbook_file="swept.yaml",
                                   payload={}, on_event=lambda e: None, execution_id="waiter",
                                   timeout_s=SWEEP_S * 4)
    waited = time.monotonic() - began

    assert final["status"] == "completed"
    assert final["result"] == "ran"
    assert waited >= 1.0  # it had to wait for the sweep: "ghost" held the only slot
    # The group is idle again: its entry is gone.

    async def idle() -> None:
        try:
            entry = await kv.get(groups.key_of("tests/swept"))
        except KeyNotFoundError:
            return
        raise AssertionError(f"the group still has an entry: {entry.value!r}")

    await assert_eventually(idle, timeout_s=30, interval_s=0.2)
