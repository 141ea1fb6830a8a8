"""Retention: a finished execution is removed by the servers' sweep after the retention while a
running one keeps its state, events and results however long it runs, and `executions purge`
removes finished executions' events, vars, step results and state now, never a running one
(which still resumes afterwards)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from cli import run_cli
from nats.js.errors import KeyNotFoundError

from noetl_stream import jsonutil
from noetl_stream.bus.connection import Bus
from noetl_stream.bus.nats_server import NatsServer
from noetl_stream.bus.signals import publish_signal
from noetl_stream.services import run_services, submit_and_watch
from noetl_stream.state.kv_keys import bucket_keys
from noetl_stream.testing.waiting import assert_eventually
from playbook_files import read_playbook

pytestmark = pytest.mark.e2e

ENDS = read_playbook("e2e", "retention_ends.yaml")

WAITS = read_playbook("e2e", "retention_waits.yaml")


async def start(bus: Bus, execution_id: str, playbook: str,
                payload: dict[str, Any] | None = None) -> asyncio.Task[dict[str, Any]]:
    return asyncio.create_task(submit_and_watch(
        bus, playbook_text=playbook, playbook_file=f"{execution_id}.yaml", payload=payload or {},
        on_event=lambda e: None, execution_id=execution_id, timeout_s=60))


async def state_of(bus: Bus, execution_id: str) -> dict[str, Any] | None:
    keys = await bucket_keys(bus.js, "noetl_executions", execution_id)
    if not keys:
        return None
    try:
        value = (await (await bus.js.key_value("noetl_executions")).get(execution_id)).value
    except KeyNotFoundError:  # purged between the listing and the read: gone all the same
        return None
    return dict(jsonutil.loads(value or b"{}"))


async def events_of(bus: Bus, execution_id: str) -> int:
    info = await bus.js.stream_info("NOETL_EVENTS", subjects_filter=f"noetl.events.{execution_id}.>")
    return sum((info.state.subjects or {}).values())


async def waiting(bus: Bus, execution_id: str) -> None:
    state = await state_of(bus, execution_id)
    assert state is not None and "approval" in {r["step"] for r in state["runs"].values()
                                                if r["status"] == "running"}


async def test_finished_executions_go_after_the_retention_running_ones_keep_everything(
        bus: Bus, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOETL_STREAM_RETENTION", "2s")
    async with run_services(bus, python_children=1):
        waits = await start(bus, "keep1", WAITS)
        done = await (await start(bus, "gone1", ENDS))
        assert done["status"] == "completed"
        assert await state_of(bus, "gone1") is not None
        assert await events_of(bus, "gone1") > 0
        await assert_eventually(lambda: waiting(bus, "keep1"), timeout_s=10)
        kept_events = await events_of(bus, "keep1")
        kept_results = await bucket_keys(bus.js, "noetl_step_results", "keep1.>")
        assert kept_results != []

        async def purged() -> None:
            assert await state_of(bus, "gone1") is None
            assert await events_of(bus, "gone1") == 0
            assert await bucket_keys(bus.js, "noetl_step_results", "gone1.>") == []

        # The servers' own sweep (every half second for a 2 s retention) removes it.
        await assert_eventually(purged, timeout_s=15)
        await asyncio.sleep(4)  # twice the retention more: nothing of the running one goes
        kept = await state_of(bus, "keep1")
        assert kept is not None and kept["status"] == "running"
        assert await events_of(bus, "keep1") == kept_events
        assert await bucket_keys(bus.js, "noetl_step_results", "keep1.>") == kept_results
        await publish_signal(bus, "keep1", "approve", None)
        assert (await asyncio.wait_for(waits, 20))["status"] == "completed"


async def test_purge_removes_finished_executions_now_never_running_ones(
        bus: Bus, nats_server: NatsServer) -> None:
    url = ["--nats-url", nats_server.url]
    async with run_services(bus, python_children=1):
        waits = await start(bus, "run2", WAITS)
        ok = await (await start(bus, "ok2", ENDS))
        bad = await (await start(bus, "bad2", ENDS, {"fail": True}))
        assert (ok["status"], bad["status"]) == ("completed", "failed")
        await assert_eventually(lambda: waiting(bus, "run2"), timeout_s=10)
        assert await bucket_keys(bus.js, "noetl_vars", "bad2.>") == ["bad2.seen"]
        assert await bucket_keys(bus.js, "noetl_step_results", "bad2.>") != []

        failed_only = await run_cli("executions", "purge", "--older-than", "0s", "--status",
                                    "failed", *url)
        assert failed_only.returncode == 0, failed_only.stderr
        assert "removed 1 finished execution" in failed_only.stderr
        assert failed_only.stdout.splitlines()[0].split() == ["EXECUTION", "STATUS", "FINISHED"]
        assert await state_of(bus, "bad2") is None
        assert await events_of(bus, "bad2") == 0
        assert await bucket_keys(bus.js, "noetl_vars", "bad2.>") == []
        assert await bucket_keys(bus.js, "noetl_step_results", "bad2.>") == []
        assert await bucket_keys(bus.js, "noetl_step_results", "ok2.>") != []
        assert await state_of(bus, "ok2") is not None and await events_of(bus, "ok2") > 0

        too_young = await run_cli("executions", "purge", "--older-than", "7d", *url)
        assert too_young.returncode == 0 and "removed 0 finished executions" in too_young.stderr

        everything = await run_cli("executions", "purge", "--older-than", "0s", "--json", *url)
        assert everything.returncode == 0, everything.stderr
        purged = [jsonutil.loads(line)["execution_id"] for line in everything.stdout.splitlines()]
        assert purged == ["ok2"]
        assert await state_of(bus, "ok2") is None and await events_of(bus, "ok2") == 0
        assert await bucket_keys(bus.js, "noetl_step_results", "ok2.>") == []
        assert await bucket_keys(bus.js, "noetl_step_results", "run2.>") != []

        running = await state_of(bus, "run2")
        assert running is not None and running["status"] == "running"
        await publish_signal(bus, "run2", "approve", None)
        assert (await asyncio.wait_for(waits, 20))["status"] == "completed"

    bad_age = await run_cli("executions", "purge", "--older-than", "soon", *url)
    assert bad_age.returncode == 2 and "not an age" in bad_age.stderr
