"""Triggers against real processes: nats-server, `noetl-stream server` and `noetl-stream worker`
as separate processes, driven by `noetl-stream trigger ...`.

The cron test needs no hour of waiting: its pattern fires every two seconds, but only in the
current hour and minute of Asia/Kolkata (UTC+05:30), a wall-clock time UTC reaches only hours
later. Fires therefore come only if nats-server reads the pattern in that zone; their nominal
times must be exactly the instants the pattern names there.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import signal
from collections import Counter
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from cli import run_cli
from processes import RoleProcess

from noetl_stream import ids, jsonutil
from noetl_stream.bus.connection import Bus
from noetl_stream.bus.nats_server import NatsServer
from noetl_stream.testing.events import stored_messages
from noetl_stream.testing.waiting import assert_eventually
from noetl_stream.triggers.cron import Cron

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "playbooks" / "examples" / "triggers"
ZONE = "Asia/Kolkata"


@pytest.fixture
async def stack(nats_server: NatsServer, bus: Bus, tmp_path: Path
                ) -> AsyncIterator[dict[str, RoleProcess]]:
    services = {role: RoleProcess(role, nats_server.url, tmp_path) for role in ("server", "worker")}
    for service in services.values():
        await service.start()
    out = await run_cli("register", str(EXAMPLES / "report.yaml"), "--nats-url", nats_server.url)
    assert out.returncode == 0, out.stderr
    try:
        yield services
    finally:
        for service in services.values():
            await service.stop()


async def cli(url: str, *args: str) -> str:
    out = await run_cli("trigger", *args, "--nats-url", url)
    assert out.returncode == 0, out.stderr
    return out.stdout


async def apply_text(url: str, tmp_path: Path, name: str, source: str, payload: str) -> None:
    doc = tmp_path / f"{name}.yaml"
    doc.write_text(f"apiVersion: noetl.io/v2\nkind: Trigger\nmetadata: {{name: {name}}}\n"
                   f"spec:\n  playbook: examples/triggers/report\n  payload: {payload}\n"
                   f"  {source}\n")
    await cli(url, "apply", str(doc))


async def fired(bus: Bus, name: str) -> list[dict[str, Any]]:
    return [jsonutil.loads(data) for _, data in await stored_messages(
        bus.js, f"noetl.triggers.events.{name}.fired", stream="NOETL_TRIGGERS")]


async def started(bus: Bus) -> dict[str, list[dict[str, Any]]]:
    """execution.started events by execution id (a list, so a second start would show)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for subject, data in await stored_messages(bus.js, "noetl.events.*.execution.started"):
        out.setdefault(subject.split(".")[2], []).append(jsonutil.loads(data))
    return out


async def completed(bus: Bus) -> set[str]:
    return {subject.split(".")[2] for subject, _ in
            await stored_messages(bus.js, "noetl.events.*.execution.completed")}


def at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@pytest.mark.timeout(120)
async def test_an_interval_trigger_starts_executions_pause_stops_them_resume_restarts_them(
        nats_server: NatsServer, bus: Bus, stack: dict[str, RoleProcess], tmp_path: Path) -> None:
    url = nats_server.url
    await apply_text(url, tmp_path, "tick", "schedule: {every: 2s}",
                     '{day: "{{ trigger.nominal_time }}", source: schedule}')

    async def three_fires() -> list[dict[str, Any]]:
        fires = await fired(bus, "tick")
        assert len(fires) >= 3
        return fires

    fires = await assert_eventually(three_fires, timeout_s=30, interval_s=0.5)
    nominal = [at(f["nominal_time"]) for f in fires]
    assert all(b - a == timedelta(seconds=2) for a, b in itertools.pairwise(nominal))
    for fire in fires:
        assert fire["execution_id"] == ids.derived_execution_id("trigger", "tick",
                                                                fire["nominal_time"])

    async def all_completed() -> None:
        done = await completed(bus)
        assert {f["execution_id"] for f in fires} <= done

    await assert_eventually(all_completed, timeout_s=30, interval_s=0.5)
    starts = await started(bus)
    for fire in fires:
        (start,) = starts[fire["execution_id"]]
        assert start["workload"]["day"] == fire["nominal_time"]
        assert start["workload"]["source"] == "schedule"

    assert "tick paused" in await cli(url, "pause", "tick")
    await asyncio.sleep(1)  # a fire nats-server produced just before the pause is handled
    paused_at = len(await fired(bus, "tick"))
    listed = json.loads(await cli(url, "list", "--json"))
    assert [(t["name"], t["state"], t["next_fire"]) for t in listed] == [("tick", "paused", None)]
    await asyncio.sleep(6)
    assert len(await fired(bus, "tick")) == paused_at

    assert "tick resumed" in await cli(url, "resume", "tick")

    async def fires_again() -> None:
        assert len(await fired(bus, "tick")) >= paused_at + 2

    await assert_eventually(fires_again, timeout_s=20, interval_s=0.5)
    (row,) = json.loads(await cli(url, "list", "--json"))
    assert row["state"] == "active"
    assert row["last_execution"]["execution_id"] in {
        f["execution_id"] for f in await fired(bus, "tick")}

    await cli(url, "delete", "tick")
    await asyncio.sleep(1)
    deleted_at = len(await fired(bus, "tick"))
    await asyncio.sleep(5)
    assert len(await fired(bus, "tick")) == deleted_at
    assert json.loads(await cli(url, "list", "--json")) == []
    assert await cli(url, "list") == "no triggers (`noetl-stream trigger apply FILE` adds one)\n"
    changes = [s.rsplit(".", 1)[-1] for s, _ in await stored_messages(
        bus.js, "noetl.triggers.events.tick.*", stream="NOETL_TRIGGERS")
        if not s.endswith(".fired")]
    assert changes == ["applied", "paused", "resumed", "deleted"]


@pytest.mark.timeout(120)
async def test_a_cron_trigger_fires_at_the_instants_its_pattern_names_in_its_time_zone(
        nats_server: NatsServer, bus: Bus, stack: dict[str, RoleProcess], tmp_path: Path) -> None:
    url = nats_server.url
    now = datetime.now(UTC)
    if now.second > 45:  # leave the minute room for three fires
        await asyncio.sleep(61 - now.second)
        now = datetime.now(UTC)
    local = now.astimezone(Cron.parse("* * * * *", ZONE).tz)
    after = local + timedelta(minutes=1)
    hours = sorted({local.hour, after.hour})
    pattern = f"*/2 {local.minute},{after.minute} {','.join(map(str, hours))} * * *"
    cron = Cron.parse(pattern, ZONE)
    # Read in UTC, the pattern is hours away: only the time zone makes it fire now.
    assert Cron.parse(pattern).next_fire(now) - now > timedelta(hours=1)
    await apply_text(url, tmp_path, "zoned", f'schedule: {{cron: "{pattern}", timezone: {ZONE}}}',
                     '{day: "{{ trigger.nominal_time }}", source: cron}')

    async def three_fires() -> list[dict[str, Any]]:
        fires = await fired(bus, "zoned")
        assert len(fires) >= 3
        return fires

    fires = await assert_eventually(three_fires, timeout_s=30, interval_s=0.5)
    nominal = [at(f["nominal_time"]) for f in fires]
    for a, b in itertools.pairwise(nominal):
        assert b == cron.next_fire(a)
    for fire, when in zip(fires, nominal, strict=True):
        wall = when.astimezone(cron.tz)
        assert wall.second % 2 == 0 and wall.minute in (local.minute, after.minute)
        # handled after its instant, and near it (a loaded machine may take a few seconds)
        assert timedelta(0) <= at(fire["fired_at"]) - when < timedelta(seconds=5)
        assert fire["next_fire"] == (cron.next_fire(when).isoformat(timespec="milliseconds")
                                     .replace("+00:00", "Z"))
    (row,) = json.loads(await cli(url, "list", "--json"))
    assert at(row["next_fire"]) > nominal[-1]


async def publish_order(bus: Bus, region: str, order: str, total: int) -> int:
    # Stored through JetStream for its ack: the stream's last sequence read after a core publish
    # may not count the message yet on a busy machine. The trigger sees the same stored message.
    ack = await bus.js.publish(f"orders.{region}.created",
                               json.dumps({"id": order, "total": total}).encode())
    assert ack.stream == "NOETL_ON_big_orders"
    return int(ack.seq)


@pytest.mark.timeout(150)
async def test_each_message_starts_one_execution_also_across_a_server_killed_9(
        nats_server: NatsServer, bus: Bus, stack: dict[str, RoleProcess]) -> None:
    url = nats_server.url
    await cli(url, "apply", str(EXAMPLES / "big_orders.yaml"))
    seqs = {}

    async def started_orders() -> dict[str, str]:
        out = {}
        for execution_id, starts in (await started(bus)).items():
            assert len(starts) == 1, starts
            workload = starts[0]["workload"]
            if workload["source"].startswith("orders."):
                out[workload["order"]] = execution_id
        return out

    seqs["A-1"] = await publish_order(bus, "eu", "A-1", 250)

    async def first_started() -> None:
        assert "A-1" in await started_orders()

    await assert_eventually(first_started, timeout_s=30, interval_s=0.3)
    await stack["server"].stop(signal.SIGKILL)
    seqs["A-2"] = await publish_order(bus, "us", "A-2", 101)  # while no server runs
    await publish_order(bus, "us", "A-small", 100)  # `when` is false: starts nothing
    await stack["server"].start()
    seqs["A-3"] = await publish_order(bus, "eu", "A-3", 999)
    await bus.nc.publish("orders.eu.created", b"not an order")  # `when` cannot read it

    async def three_started() -> dict[str, str]:
        orders = await started_orders()
        assert set(orders) == {"A-1", "A-2", "A-3"}
        return orders

    orders = await assert_eventually(three_started, timeout_s=60, interval_s=0.5)
    for order, execution_id in orders.items():
        assert execution_id == ids.derived_execution_id(
            "trigger-message", "big_orders", "NOETL_ON_big_orders", str(seqs[order]))

    async def all_completed() -> None:
        assert set(orders.values()) <= await completed(bus)

    await assert_eventually(all_completed, timeout_s=30, interval_s=0.5)
    # Nothing more comes later (a redelivery after the ack wait would show here as a second
    # start or a second `fired` event of one message).
    await asyncio.sleep(2)
    assert await started_orders() == orders
    messages = Counter(f["message"] for f in await fired(bus, "big_orders"))
    assert sorted(messages.values()) == [1, 1, 1]
    (failed,) = [jsonutil.loads(d) for _, d in await stored_messages(
        bus.js, "noetl.triggers.events.big_orders.failed", stream="NOETL_TRIGGERS")]
    assert failed["reason"].startswith('on.when: field "on.when"'), failed


async def test_trigger_fire_starts_one_execution_of_a_paused_trigger(
        nats_server: NatsServer, bus: Bus, stack: dict[str, RoleProcess]) -> None:
    url = nats_server.url
    await cli(url, "apply", str(EXAMPLES / "heartbeat.yaml"))
    await cli(url, "pause", "heartbeat")
    out = await cli(url, "fire", "heartbeat")
    nominal = out.strip().rsplit(" ", 1)[-1]
    execution_id = ids.derived_execution_id("trigger", "heartbeat", nominal)

    async def done() -> None:
        assert execution_id in await completed(bus)

    await assert_eventually(done, timeout_s=30, interval_s=0.3)
    assert [f["execution_id"] for f in await fired(bus, "heartbeat")] == [execution_id]
    (row,) = json.loads(await cli(url, "list", "--json"))
    assert (row["state"], row["last_execution"]["execution_id"], row["last_execution"]["status"],
            row["last_execution"]["nominal_time"]) == ("paused", execution_id, "completed", nominal)
    header, line = (await cli(url, "list")).splitlines()
    assert header.split() == ["NAME", "STATE", "SOURCE", "PLAYBOOK", "NEXT", "FIRE", "LAST",
                              "EXECUTION", "STATUS", "FIRED", "AT"]
    assert line.split()[:4] == ["heartbeat", "paused", "every", "5m"]
    assert line.split()[5:8] == ["-", execution_id, "completed"]


async def test_apply_refuses_a_bad_document_and_an_unregistered_playbook(
        nats_server: NatsServer, bus: Bus, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: noetl.io/v2\nkind: Trigger\nmetadata: {name: x}\nspec:\n"
                   "  playbook: examples/triggers/report\n  schedule: {cron: '0 2 * *'}\n")
    out = await run_cli("trigger", "apply", str(bad), "--nats-url", nats_server.url)
    assert out.returncode == 2
    assert f'{bad}:6: field "spec.schedule.cron"' in out.stderr
    assert "Traceback" not in out.stderr
    unregistered = await run_cli("trigger", "apply", str(EXAMPLES / "nightly.yaml"),
                                 "--nats-url", nats_server.url)
    assert unregistered.returncode == 2
    assert unregistered.stderr.strip() == (
        "noetl-stream: no playbook is registered under examples/triggers/report "
        "(`noetl-stream register FILE` registers one)")
    missing = await run_cli("trigger", "pause", "nightly", "--nats-url", nats_server.url)
    assert missing.returncode == 2 and "no trigger named nightly" in missing.stderr


async def test_validate_checks_trigger_documents(tmp_path: Path) -> None:
    examples = sorted(str(p) for p in EXAMPLES.glob("*.yaml"))
    ok = await run_cli("validate", *examples)
    assert ok.returncode == 0, ok.stderr
    assert f"{EXAMPLES / 'nightly.yaml'}: ok (trigger nightly: cron 0 2 * * * " \
           "(Europe/Amsterdam) -> examples/triggers/report)" in ok.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text("apiVersion: noetl.io/v2\nkind: Trigger\nmetadata: {name: x}\n"
                   "spec: {playbook: a, on: {subject: 'orders.>.x'}}\n")
    out = await run_cli("validate", str(bad))
    assert out.returncode == 2
    assert out.stderr.startswith(f'{bad}:4: field "spec.on.subject"')


@pytest.mark.timeout(150)
async def test_fires_while_the_server_is_killed_9_each_start_once_after_it_is_back(
        nats_server: NatsServer, bus: Bus, stack: dict[str, RoleProcess], tmp_path: Path) -> None:
    url = nats_server.url
    await apply_text(url, tmp_path, "steady", "schedule: {every: 1s}",
                     '{day: "{{ trigger.nominal_time }}", source: schedule}')

    async def fires_at_least(n: int) -> list[dict[str, Any]]:
        fires = await fired(bus, "steady")
        assert len(fires) >= n
        return fires

    before = len(await assert_eventually(lambda: fires_at_least(3), timeout_s=30, interval_s=0.2))
    await stack["server"].stop(signal.SIGKILL)
    await asyncio.sleep(4)  # nats-server keeps firing; the fires wait in the stream
    await stack["server"].start()
    await assert_eventually(lambda: fires_at_least(before + 8), timeout_s=60, interval_s=0.5)
    await cli(url, "pause", "steady")
    await asyncio.sleep(1)

    # A fire the killed server had started but not acknowledged comes back after the ack wait
    # (30 s) and finds its execution; wait for every nominal time up to the last to be there.
    async def no_gap() -> list[datetime]:
        nominal = sorted(at(f["nominal_time"]) for f in await fired(bus, "steady"))
        assert all(b - a == timedelta(seconds=1) for a, b in itertools.pairwise(nominal)), nominal
        return nominal

    nominal = await assert_eventually(no_gap, timeout_s=45, interval_s=1)
    starts = await started(bus)
    for when in nominal:
        execution_id = ids.derived_execution_id("trigger", "steady", _iso_ms(when))
        assert len(starts[execution_id]) == 1


def _iso_ms(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
