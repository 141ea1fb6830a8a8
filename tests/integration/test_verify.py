"""`noetl-stream verify` against real executions on a real nats-server: the state each commits is
the state its recorded events rebuild through the router (loops, a join, retries, a listener
answered by a signal, a sub-playbook), and a state edited by hand is caught, naming the field."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest

from local_http import HttpService
from noetl_stream import jsonutil
from noetl_stream.bus.connection import Bus
from noetl_stream.bus.nats_server import NatsServer
from noetl_stream.bus.signals import publish_signal
from noetl_stream.dsl.composition import load_with_children
from noetl_stream.server.execution_ids import new_execution_id
from noetl_stream.server.verify import verify
from noetl_stream.services import submit_and_watch
from noetl_stream.state.catalog import register_files
from noetl_stream.testing.events import stored_messages
from noetl_stream.testing.waiting import assert_eventually
from playbook_files import read_playbook

pytestmark = pytest.mark.integration

CLI = Path(sys.executable).with_name("noetl-stream")
APPROVAL = Path(__file__).resolve().parents[2] / "playbooks" / "examples" / "approval.yaml"


async def _run(bus: Bus, text: str, payload: dict[str, Any] | None = None,
               events: list[dict[str, Any]] | None = None,
               execution_id: str | None = None) -> tuple[str, dict[str, Any]]:
    execution_id = execution_id or new_execution_id()
    sink = events if events is not None else []
    final = await submit_and_watch(bus, playbook_text=text, playbook_file="test.yaml",
                                   payload=payload or {}, on_event=sink.append,
                                   execution_id=execution_id, timeout_s=60)
    return execution_id, final


async def cli(nats_url: str, *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        str(CLI), *args, "--nats-url", nats_url,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def _equal(bus: Bus, execution_id: str) -> None:
    verdict = await verify(bus, execution_id)
    assert verdict.outcome == "equal", verdict.detail
    assert verdict.events > 0


async def test_loops_joins_and_retries_rebuild_to_the_committed_state(
        bus: Bus, services: None, http_service: HttpService, nats_server: NatsServer) -> None:
    text = read_playbook("integration", "verify_shapes.yaml", api_url=http_service.url)
    execution_id, final = await _run(bus, text)
    assert final["status"] == "completed", final.get("error")
    assert final["result"] == {"sum": 55, "calls": 3}

    await _equal(bus, execution_id)
    code, out, err = await cli(nats_server.url, "verify", execution_id)
    assert code == 0, err
    assert f"{execution_id}: equal to its" in out


async def test_a_failed_execution_and_a_listener_answered_by_a_signal_verify(
        bus: Bus, services: None) -> None:
    events: list[dict[str, Any]] = []
    execution_id = new_execution_id()
    task = asyncio.create_task(_run(bus, APPROVAL.read_text(), events=events,
                                    execution_id=execution_id))

    def listening() -> None:
        assert any(e["event_type"] == "step.started" and e.get("step") == "wait_for_approval"
                   for e in events)
    await assert_eventually(listening, timeout_s=30)
    # Verified while it waits too: the running state equals its events so far.
    await _equal(bus, execution_id)
    await publish_signal(bus, execution_id, "ping", {})  # heard by nobody: changes nothing
    await publish_signal(bus, execution_id, "approve", {"user": "ada"})
    _, final = await task
    assert final["status"] == "completed", final.get("error")
    await _equal(bus, execution_id)

    rejected_events: list[dict[str, Any]] = []
    rejected_id = new_execution_id()
    rejected = asyncio.create_task(_run(bus, APPROVAL.read_text(), events=rejected_events,
                                        execution_id=rejected_id))
    await assert_eventually(lambda: _assert_listening(rejected_events), timeout_s=30)
    await publish_signal(bus, rejected_id, "reject", {"user": "bob"})
    _, final = await rejected
    assert final["status"] == "failed"
    await _equal(bus, rejected_id)


def _assert_listening(events: list[dict[str, Any]]) -> None:
    assert any(e["event_type"] == "step.started" and e.get("step") == "wait_for_approval"
               for e in events)


async def test_a_parent_and_its_child_verify(bus: Bus, services: None, tmp_path: Path) -> None:
    (tmp_path / "child.yaml").write_text(read_playbook("integration", "subplaybooks_child.yaml"))
    (tmp_path / "parent.yaml").write_text(read_playbook("integration", "subplaybooks_parent.yaml"))
    composed = load_with_children(tmp_path / "parent.yaml")
    await register_files(bus.js, composed.files)
    parent_id, final = await _run(bus, composed.files[0].text, {"n": 4})
    assert final["status"] == "completed", final.get("error")

    stored = await stored_messages(bus.js, "noetl.events.*.execution.started")
    children = [jsonutil.loads(data)["execution_id"] for _, data in stored
                if jsonutil.loads(data).get("parent_execution_id") == parent_id]
    assert len(children) == 1
    await _equal(bus, parent_id)
    await _equal(bus, children[0])


async def test_a_state_edited_by_hand_fails_naming_the_field(
        bus: Bus, services: None, http_service: HttpService, nats_server: NatsServer) -> None:
    text = read_playbook("integration", "verify_shapes.yaml", api_url=http_service.url)
    execution_id, final = await _run(bus, text)
    assert final["status"] == "completed", final.get("error")
    kv = await bus.js.key_value("noetl_executions")
    entry = await kv.get(execution_id)
    state = jsonutil.loads(entry.value or b"{}")
    state["steps"]["flaky"]["runs"] = 2
    await kv.put(execution_id, jsonutil.dumps(state))

    verdict = await verify(bus, execution_id)
    assert verdict.outcome == "different"
    assert verdict.detail.startswith("steps.flaky.runs: committed 2, rebuilt from events 1")
    code, _, err = await cli(nats_server.url, "verify", execution_id)
    assert code == 1
    assert "steps.flaky.runs" in err and "Traceback" not in err

    code, out, err = await cli(nats_server.url, "verify", "--all", "--since", "1d")
    assert code == 1, out
    assert "1 of 1 executions differ" in err

    code, _, err = await cli(nats_server.url, "verify", "4242")
    assert code == 2
    assert "no committed state of execution 4242" in err


async def test_a_result_in_the_object_store_verifies(bus: Bus, services: None) -> None:
    """The first step's result (about 1.1 MB) is stored by the worker in the object store: the
    state and the end event's summary hold references, compared as the values they name."""
    text = read_playbook("integration", "large_results_big.yaml", rows=10_000)
    execution_id, final = await _run(bus, text)
    assert final["status"] == "completed", final.get("error")
    await _equal(bus, execution_id)
