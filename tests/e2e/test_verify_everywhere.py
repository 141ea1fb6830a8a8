"""The check every e2e test ends with (tests/e2e/conftest.py) passes on the executions a test
made and names the one whose committed state was edited by hand."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli import run_cli

from noetl_stream import jsonutil
from noetl_stream.bus.connection import Bus
from noetl_stream.bus.nats_server import NatsServer
from noetl_stream.services import run_services
from noetl_stream.testing.verifying import differences, verify_every_execution
from playbook_files import playbook_path

pytestmark = pytest.mark.e2e


@pytest.mark.unverified("edits a committed state by hand to show the check catches it")
async def test_the_check_names_a_state_edited_by_hand(bus: Bus, nats_server: NatsServer,
                                                      tmp_path: Path) -> None:
    async with run_services(bus, python_children=0):
        runs = [await run_cli("run", str(playbook_path("integration", "three_noops.yaml")),
                              "--json", "--quiet", "--nats-url", nats_server.url)
                for _ in range(2)]
    assert [r.returncode for r in runs] == [0, 0], runs[0].stderr
    verdicts = await verify_every_execution(bus)
    assert [v.outcome for v in verdicts] == ["equal", "equal"]
    assert differences(verdicts) is None

    edited = str(runs[1].summary["execution_id"])
    kv = await bus.js.key_value("noetl_executions")
    state = jsonutil.loads((await kv.get(edited)).value or b"{}")
    state["applied"] += 1
    await kv.put(edited, jsonutil.dumps(state))
    found = differences(await verify_every_execution(bus))
    assert found is not None
    assert found.startswith(f"1 of 2 executions differ from their events; {edited} at applied: ")
