"""Through the real server and worker: `executor.spec.timeout` bounds the whole execution (it
fails with kind `timeout` and its running command is withdrawn; no task inherits it as its own
timeout); a loop in a child playbook started from a parent loop iteration reads that iteration as
`iter.parent` (spec 002 §6.4)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from noetl_stream.bus.connection import Bus
from noetl_stream.dsl.composition import load_with_children
from noetl_stream.services import submit_and_watch
from noetl_stream.state.catalog import register_files
from playbook_files import read_playbook

pytestmark = pytest.mark.integration

TIMEOUTS = read_playbook("integration", "spec_layering_and_nesting_timeouts.yaml")


async def test_executor_spec_timeout_fails_the_whole_execution_with_kind_timeout(
        bus: Bus, services: None) -> None:
    events: list[dict[str, object]] = []
    began = time.monotonic()
    final = await submit_and_watch(bus, playbook_text=TIMEOUTS, playbook_file="timeouts.yaml",
                                   payload={}, on_event=events.append, execution_id="layer1",
                                   timeout_s=30)
    took = time.monotonic() - began

    assert final["status"] == "failed"
    assert final["error"]["kind"] == "timeout"
    assert "ran longer than its timeout of 2s (executor.spec.timeout)" in final["error"]["message"]
    assert final["steps"]["start"]["result"] == "ran within the execution's timeout"
    assert final["steps"]["slow"]["status"] == "failed"
    assert final["steps"]["slow"]["error"]["kind"] == "timeout"
    # The schedule fires on a whole second of nats-server's clock: 2 to 3 s after the start,
    # long before the 60 s the task would take (and before python's 300 s default).
    assert 2 <= took < 15, took
    assert any(e.get("event_type") == "step.timeout" and e.get("step") == "slow" for e in events)


CHILD = read_playbook("integration", "spec_layering_and_nesting_child.yaml")

PARENT = read_playbook("integration", "spec_layering_and_nesting_parent.yaml")


async def test_child_loop_reads_the_parent_loop_iteration_as_iter_parent(
        bus: Bus, services: None, tmp_path: Path) -> None:
    (tmp_path / "hotels.yaml").write_text(CHILD)
    (tmp_path / "cities.yaml").write_text(PARENT)
    composed = load_with_children(tmp_path / "cities.yaml")
    await register_files(bus.js, composed.files)

    final = await submit_and_watch(bus, playbook_text=composed.files[0].text,
                                   playbook_file="cities.yaml", payload={},
                                   on_event=lambda e: None, execution_id="nest1", timeout_s=60)

    assert final["status"] == "completed", final.get("error")
    assert final["result"] == [["0:Oslo/a", "0:Oslo/b"], ["1:Rome/c"]]
