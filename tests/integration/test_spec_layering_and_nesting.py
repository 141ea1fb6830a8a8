"""Through the real server and worker: a timeout set in `executor.spec` reaches a python task and
a task's own spec overrides it (spec 002 §3); a loop in a child playbook started from a parent
loop iteration reads that iteration as `iter.parent` (spec 002 §6.4)."""

from __future__ import annotations

from pathlib import Path

import pytest

from noetl_stream.dsl.composition import load_with_children
from noetl_stream.runtime.connection import Bus
from noetl_stream.runtime.services import submit_and_watch
from noetl_stream.state.catalog import register_files
from playbook_files import read_playbook

pytestmark = pytest.mark.integration

TIMEOUTS = read_playbook("integration", "spec_layering_and_nesting_timeouts.yaml")


async def test_executor_spec_timeout_binds_a_python_task_unless_its_own_spec_overrides_it(
        bus: Bus, services: None) -> None:
    final = await submit_and_watch(bus, playbook_text=TIMEOUTS, playbook_file="timeouts.yaml",
                                   payload={}, on_event=lambda e: None, execution_id="layer1",
                                   timeout_s=30)

    assert final["status"] == "failed"
    assert final["steps"]["start"]["result"] == "slept past the executor's timeout"
    error = final["steps"]["inherits"]["error"]
    assert "ran longer than its timeout of 0.5s" in error["message"]
    assert error["kind"] == "timeout"


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
