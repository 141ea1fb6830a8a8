"""Two subject triggers reading the same subject: each message starts one execution for each of
them (the execution id names the trigger as well as the message's stream and sequence)."""

from __future__ import annotations

from pathlib import Path

from noetl_stream import ids, jsonutil
from noetl_stream.bus.connection import Bus
from noetl_stream.dsl.composition import load_with_children
from noetl_stream.server import trigger_ops
from noetl_stream.services import run_services
from noetl_stream.state.catalog import register_files, register_path
from noetl_stream.testing.events import stored_messages
from noetl_stream.testing.waiting import assert_eventually
from noetl_stream.triggers.document import parse_trigger

ROOT = Path(__file__).resolve().parents[2]


def _doc(name: str) -> str:
    return (f"apiVersion: noetl.io/v2\nkind: Trigger\nmetadata: {{name: {name}}}\n"
            "spec:\n  playbook: examples/triggers/report\n"
            f"  payload: {{order: '{{{{ message.data.id }}}}', source: {name}}}\n"
            "  on: {subject: 'shared.orders'}\n")


async def test_each_trigger_on_a_subject_starts_its_own_execution_per_message(bus: Bus) -> None:
    composed = load_with_children(ROOT / "playbooks" / "examples" / "triggers" / "report.yaml")
    await register_files(bus.js, composed.files)
    await register_path(bus.js, composed.playbook, composed.files[0].key)
    records = [(await trigger_ops.apply(bus, parse_trigger(_doc(n)), _doc(n)))[0]
               for n in ("audit", "notify")]
    assert records[0].source is not None and records[1].source is not None
    assert records[0].source.stream == records[1].source.stream
    async with run_services(bus, python_children=1):
        for order in ("A-1", "A-2"):
            await bus.js.publish("shared.orders", jsonutil.dumps({"id": order}))

        async def four_started() -> list[tuple[str, str, str]]:
            starts = [(s.split(".")[2], jsonutil.loads(d)["workload"]) for s, d in
                      await stored_messages(bus.js, "noetl.events.*.execution.started")]
            out = sorted((w["source"], w["order"], e) for e, w in starts)
            assert len(out) == 4
            return out

        started = await assert_eventually(four_started, timeout_s=30, interval_s=0.3)
    stream = records[0].source.stream
    assert started == sorted(
        (name, order, ids.derived_execution_id("trigger-message", name, stream, str(seq)))
        for name in ("audit", "notify") for seq, order in ((1, "A-1"), (2, "A-2")))
