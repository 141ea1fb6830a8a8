"""One fire of a schedule, handled however many times (a redelivery after a server died before
its ack, two servers), starts one execution: nats-server's own fire message is taken from the
stream and handed to the trigger service twice before the servers' durable delivers it again.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from noetl_stream import ids, jsonutil
from noetl_stream.bus.connection import Bus
from noetl_stream.dsl.composition import load_with_children
from noetl_stream.server import trigger_ops
from noetl_stream.server.triggers import TriggerService, fire_nominal
from noetl_stream.services import run_services
from noetl_stream.state import triggers as store
from noetl_stream.state.catalog import register_files, register_path
from noetl_stream.testing.events import stored_messages
from noetl_stream.testing.waiting import assert_eventually
from noetl_stream.triggers.document import parse_trigger

ROOT = Path(__file__).resolve().parents[2]
TICK = """apiVersion: noetl.io/v2
kind: Trigger
metadata: {name: tick}
spec:
  playbook: examples/triggers/report
  payload: {day: "{{ trigger.nominal_time }}", source: schedule}
  schedule: {every: 1s}
"""


async def test_a_fire_handled_three_times_starts_one_execution(bus: Bus) -> None:
    composed = load_with_children(ROOT / "playbooks" / "examples" / "triggers" / "report.yaml")
    await register_files(bus.js, composed.files)
    await register_path(bus.js, composed.playbook, composed.files[0].key)
    await trigger_ops.apply(bus, parse_trigger(TICK), TICK)
    # Two readers of our own on the fire subject, beside the servers' durable: each gets the
    # first fire, as a redelivery would hand it over again.
    copies = []
    for reader in ("reader-1", "reader-2"):
        sub = await bus.js.pull_subscribe(
            "noetl.triggers.fire.tick", durable=reader, stream="NOETL_TRIGGERS",
            config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, deliver_policy=DeliverPolicy.ALL))
        copies += await sub.fetch(1, timeout=10)
    msg, again = copies
    assert msg.metadata.sequence.stream == again.metadata.sequence.stream
    assert msg.headers is not None and "Nats-Schedule-Next" in msg.headers
    found = await store.read_record(bus.js, "tick")
    assert found is not None
    nominal, _ = fire_nominal(found[0], msg)
    execution_id = ids.derived_execution_id("trigger", "tick", nominal)

    service = TriggerService(bus)  # not started: only these two calls handle anything
    await service.handle_fire(msg)
    await service.handle_fire(again)

    async with run_services(bus, python_children=1):  # the servers' durable delivers it too
        async def completed() -> None:
            done = {s.split(".")[2] for s, _ in await stored_messages(
                bus.js, "noetl.events.*.execution.completed")}
            assert execution_id in done

        await assert_eventually(completed, timeout_s=30, interval_s=0.3)
        fires = await stored_messages(bus.js, "noetl.triggers.events.tick.fired",
                                      stream="NOETL_TRIGGERS")
        assert [jsonutil.loads(d)["execution_id"] for _, d in fires].count(execution_id) == 1

    starts = [(s.split(".")[2], jsonutil.loads(d)) for s, d in await stored_messages(
        bus.js, "noetl.events.*.execution.started")]
    # Every execution of that nominal time: one, under the id derived from it.
    assert [e for e, body in starts if body["workload"]["day"] == nominal] == [execution_id]


async def _fire_count(bus: Bus) -> int:
    info = await bus.js.stream_info("NOETL_TRIGGERS", subjects_filter="noetl.triggers.fire.tick")
    return sum((info.state.subjects or {}).values())


async def test_a_resume_cut_short_is_finished_by_resuming_again(bus: Bus) -> None:
    composed = load_with_children(ROOT / "playbooks" / "examples" / "triggers" / "report.yaml")
    await register_files(bus.js, composed.files)
    await register_path(bus.js, composed.playbook, composed.files[0].key)
    await trigger_ops.apply(bus, parse_trigger(TICK), TICK)
    assert await trigger_ops.set_state(bus, "tick", "paused")
    found = await store.read_record(bus.js, "tick")
    assert found is not None
    # A resume that died after its KV write, before its schedule message.
    await store.write_record(bus.js, found[0].model_copy(update={"state": "active"}))
    before = await _fire_count(bus)
    await asyncio.sleep(3)
    assert await _fire_count(bus) == before  # no schedule in force

    assert not await trigger_ops.set_state(bus, "tick", "active")  # already active: repaired

    async def fires_again() -> None:
        assert await _fire_count(bus) >= before + 2

    await assert_eventually(fires_again, timeout_s=10, interval_s=0.3)
