"""The trigger scenario: a schedule firing every second and a subject trigger fed a message every
half second, on a stack of their own (nats-server, a server and a worker), while the server is
killed -9 three times at random moments and restarted.

Afterwards every nominal time from the first fire to the last must have exactly one `fired`
event and exactly one started execution (none lost, none doubled), and every published message
exactly one execution. A fire or message the killed server held without acknowledging comes
back after the consumers' ack wait (the chaos stack's NOETL_STREAM_ROUTER_ACK_WAIT_S, 4 s), so
the check waits for that.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from harness import CLI, Run, Stack, connect_client, read_stream, retrying
from nats.js.api import DeliverPolicy

from noetl_stream import ids
from noetl_stream.bus.connection import Bus, connect
from noetl_stream.server import trigger_ops
from noetl_stream.triggers.document import parse_trigger

ROOT = Path(__file__).resolve().parents[2]
REPORT = ROOT / "playbooks" / "examples" / "triggers" / "report.yaml"
KILLS = 3
FIRING_S = 9.0
REDELIVERY_S = 15.0


async def _cli(stack: Stack, *args: str) -> None:
    proc = await asyncio.create_subprocess_exec(
        str(CLI), *args, "--nats-url", stack.urls[0], stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, env=stack.knobs.env(stack.home, stack.urls))
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    if proc.returncode != 0:
        raise RuntimeError(f"noetl-stream {' '.join(args)}: {err.decode().strip()}")


async def _apply(bus: Bus, name: str, source: str, payload: str) -> None:
    text = (f"apiVersion: noetl.io/v2\nkind: Trigger\nmetadata: {{name: {name}}}\n"
            f"spec:\n  playbook: examples/triggers/report\n  payload: {payload}\n  {source}\n")
    await trigger_ops.apply(bus, parse_trigger(text), text)


async def trigger_firing(run: Run) -> None:
    stack = Stack(run.stack.folder / "triggers", run.knobs, servers=1, workers=1)
    await stack.start_nats()
    try:
        await stack.start()
        client = await connect_client(stack.urls)
        try:
            await _scenario(run, stack, client.js, client.nc)
        finally:
            await client.nc.close()
    finally:
        await stack.stop()


async def _scenario(run: Run, stack: Stack, js: Any, nc: Any) -> None:
    problems = len(run.problems)
    await _cli(stack, "register", str(REPORT))
    bus = await connect(stack.urls[0], name="chaos-triggers")
    try:
        await _apply(bus, "beat", "schedule: {every: 1s}", '{day: "{{ trigger.nominal_time }}"}')
        await _apply(bus, "orders", 'on: {subject: "chaos.orders"}',
                     '{order: "{{ message.data.id }}", source: chaos}')
        await _fire_and_kill(run, stack, js, bus)
    finally:
        await bus.close()
    if len(run.problems) == problems:
        run.notes.append(f"triggers: every fire time and message through {KILLS} kills of the "
                         "server started exactly once")


async def _fire_and_kill(run: Run, stack: Stack, js: Any, bus: Bus) -> None:
    t0 = time.monotonic()
    kills = sorted(run.rng.uniform(1.0, FIRING_S - 2) for _ in range(KILLS))
    sent: list[str] = []

    async def feed() -> None:
        while time.monotonic() - t0 < FIRING_S:
            order = f"o{len(sent)}"
            await retrying(lambda o=order: js.publish("chaos.orders", json.dumps(
                {"id": o}).encode()), deadline=time.monotonic() + 30, what="publish an order")
            sent.append(order)
            await asyncio.sleep(0.5)

    feeding = asyncio.create_task(feed())
    for at in kills:
        await asyncio.sleep(max(0.0, at - (time.monotonic() - t0)))
        server = stack.of("server")[0]
        await stack.kill(server)
        run.notes.append(f"triggers: server killed at {time.monotonic() - t0:.1f} s")
        await asyncio.sleep(run.rng.uniform(0.3, 1.5))
        await stack.restart(server)
    await feeding
    # Every fire time up to now must be started; the schedule keeps firing until the check has
    # seen them (a fire handled after a pause starts nothing, by design).
    cutoff = datetime.now(UTC) - timedelta(seconds=1)
    fires, orders, started = await _settled(js, sent, cutoff, time.monotonic() + REDELIVERY_S)
    await trigger_ops.set_state(bus, "beat", "paused")
    _check(run, fires, orders, sent, started)
    run.notes.append(f"triggers: {len(set(fires))} fire times, {len(sent)} messages")


async def _fired(js: Any) -> list[datetime]:
    """The nominal times of the schedule's `fired` events, as stored in NOETL_TRIGGERS."""
    subject = "noetl.triggers.events.beat.fired"
    info = await js.stream_info("NOETL_TRIGGERS", subjects_filter=subject)
    expected = sum((info.state.subjects or {}).values())
    out: list[datetime] = []
    if not expected:
        return out
    sub = await js.subscribe(subject, stream="NOETL_TRIGGERS", ordered_consumer=True,
                             deliver_policy=DeliverPolicy.ALL)
    try:
        while len(out) < expected:
            msg = await sub.next_msg(timeout=5.0)
            out.append(_at(json.loads(msg.data)["nominal_time"]))
    finally:
        await sub.unsubscribe()
    return out


async def _settled(js: Any, sent: list[str], cutoff: datetime, deadline: float
                   ) -> tuple[list[datetime], dict[str, list[str]], Counter[str]]:
    """The fired nominal times, the executions per order and every started execution id,
    once they show no gap (or at the deadline, as they are).
    """
    while True:
        fires = await _fired(js)
        orders: dict[str, list[str]] = {}
        started: Counter[str] = Counter()
        for m in await read_stream(js, "noetl.events.*.execution.started"):
            execution_id = m.subject.split(".")[2]
            started[execution_id] += 1
            workload = json.loads(m.data).get("workload", {})
            if workload.get("source") == "chaos":
                orders.setdefault(str(workload["order"]), []).append(execution_id)
        ordered = sorted(set(fires))
        gapless = all(b - a == timedelta(seconds=1) for a, b in itertools.pairwise(ordered))
        covered = bool(ordered) and ordered[-1] >= cutoff
        if (gapless and covered and set(orders) == set(sent)) or time.monotonic() > deadline:
            return fires, orders, started
        await asyncio.sleep(1.0)


def _check(run: Run, fires: list[datetime], orders: dict[str, list[str]], sent: list[str],
           started: Counter[str]) -> None:
    counts = Counter(fires)
    doubled = [t for t, n in counts.items() if n > 1]
    ordered = sorted(counts)
    lost = [a + timedelta(seconds=k) for a, b in itertools.pairwise(ordered)
            for k in range(1, int((b - a).total_seconds()))]
    if doubled:
        run.problems.append(f"triggers: fire times fired twice: {doubled[:3]}")
    if lost:
        run.problems.append(f"triggers: fire times lost: {lost[:3]}")
    if len(ordered) < FIRING_S / 2:
        run.problems.append(f"triggers: only {len(ordered)} fire times in {FIRING_S:g} s")
    missing = sorted(set(sent) - set(orders))
    twice = sorted(o for o, e in orders.items() if len(e) != 1)
    if missing or twice:
        run.problems.append(f"triggers: messages not started {missing[:3]}, started twice "
                            f"{twice[:3]}")
    not_once = [t for t in ordered
                if started[ids.derived_execution_id("trigger", "beat", _iso(t))] != 1]
    if not_once:
        run.problems.append(f"triggers: fire times without exactly one execution: "
                            f"{not_once[:3]}")


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _iso(moment: datetime) -> str:
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
