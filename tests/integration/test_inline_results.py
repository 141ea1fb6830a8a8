"""Small step results inline in the state on a real nats-server: a chain of steps that return
little writes no entry of its own to KV `noetl_step_results`, a large result still goes by key,
both read back on a server that never saw the execution, and the results kept inline stay
within their budget."""

from __future__ import annotations

import re
import textwrap
from typing import Any

import pytest
from nats.aio.msg import Msg
from paused_runs import committed_state, run_until_started

from noetl_stream import jsonutil
from noetl_stream.bus.connection import Bus
from noetl_stream.bus.signals import publish_signal
from noetl_stream.router.state import PAGE_SIZE, ExecutionState, StepRecord
from noetl_stream.server.execution_ids import new_execution_id
from noetl_stream.services import run_services, submit_and_watch
from noetl_stream.state.results import ResultStore
from noetl_stream.state.step_results import BUCKET, INLINE_BUDGET, SMALL_RESULT, StepResults

pytestmark = pytest.mark.integration

RESULT_KEY = re.compile(r"^[0-9a-f]{32}$")  # an entry named by content, not a mark or a claim

MIXED = textwrap.dedent("""\
    apiVersion: noetl.io/v2
    kind: Playbook
    metadata: {name: mixed}
    workflow:
      - step: small
        tool: {kind: python, code: 'result = {"n": 41, "word": "kept"}'}
        next: large
      - step: large
        tool: {kind: python, code: 'result = {"pad": "x" * 3000}'}
        next: wait
      - step: wait
        eval_mode: on_event
        case:
          - when: "{{ event.name == 'signal.go' }}"
            then: {next: [last]}
      - step: last
        tool: {kind: noop, input: {n: "{{ small.n + 1 }}", word: "{{ small.word }}",
                                   size: "{{ large.pad | length }}"}}
    """)


def _chain(count: int) -> str:
    steps = "".join(f"  - step: s{i}\n    tool: {{kind: noop, input: {{i: {i}}}}}\n"
                    + (f"    next: s{i + 1}\n" if i < count else "") for i in range(1, count + 1))
    return "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: chain}\nworkflow:\n" + steps


async def _count_result_writes(bus: Bus, execution_id: str) -> tuple[list[str], Any]:
    """Every write of a result entry of the execution, as its key, seen on the bucket's subject."""
    written: list[str] = []

    async def seen(msg: Msg) -> None:
        key = msg.subject.rsplit(".", 1)[-1]
        if RESULT_KEY.match(key):
            written.append(key)

    sub = await bus.nc.subscribe(f"$KV.{BUCKET}.{execution_id}.>", cb=seen)
    return written, sub


async def test_a_chain_of_steps_that_return_little_writes_no_result_entry(bus: Bus) -> None:
    count = 30
    execution_id = new_execution_id()
    written, sub = await _count_result_writes(bus, execution_id)
    async with run_services(bus):
        final = await submit_and_watch(bus, playbook_text=_chain(count), playbook_file="chain.yaml",
                                       payload={}, on_event=lambda _e: None,
                                       execution_id=execution_id, timeout_s=120)
    await bus.nc.flush()
    await sub.unsubscribe()
    assert final["status"] == "completed", final.get("error")
    assert written == []  # before: one entry per step, each its own stored write

    committed = await committed_state(bus, execution_id)
    for i in range(1, count + 1):
        record = committed["steps"][f"s{i}"]
        assert record["result_key"] is None and record["result"] == final["steps"][f"s{i}"]["result"]
        assert record["result"] == {"i": i}


async def test_small_and_large_results_read_back_on_a_server_that_never_saw_them(bus: Bus) -> None:
    execution_id = new_execution_id()
    watch, stored = await run_until_started(bus, MIXED, "mixed.yaml", execution_id, "wait")
    small, large = stored["steps"]["small"], stored["steps"]["large"]
    assert small["result"] == {"n": 41, "word": "kept"} and small["result_key"] is None
    assert "result" not in large and RESULT_KEY.match(large["result_key"])
    entry = await (await bus.js.key_value(BUCKET)).get(f"{execution_id}.{large['result_key']}")
    assert len(jsonutil.loads(entry.value or b"{}")["v"]["pad"]) == 3000

    # Cold: a store that never saw the execution reads the state as committed.
    state = ExecutionState.from_dict(stored)
    await StepResults(bus.js, ResultStore(bus.js)).load(state)
    assert state.steps["small"].result == {"n": 41, "word": "kept"}
    assert state.steps["large"].result == {"pad": "x" * 3000}

    async with run_services(bus, python_children=1):  # a new server: nothing cached
        await publish_signal(bus, execution_id, "go", {})
        final = await watch
    assert final["status"] == "completed", final.get("error")
    assert final["result"] == {"n": 42, "word": "kept", "size": 3000}
    assert final["steps"]["small"]["result"] == {"n": 41, "word": "kept"}
    assert final["steps"]["large"]["result"] == {"pad": "x" * 3000}
    # The new server kept the small result inline, as it was committed.
    assert (await committed_state(bus, execution_id))["steps"]["small"]["result_key"] is None


async def test_results_kept_inline_stay_within_the_budget_and_the_rest_go_by_key(bus: Bus) -> None:
    execution_id = new_execution_id()
    state = ExecutionState(execution_id=execution_id, playbook_key="k", workload={})
    each = SMALL_RESULT // 2
    count = 2 * INLINE_BUDGET // each
    for i in range(count):
        rec = state.record(f"s{i}")
        rec.status = "running"
        state.set_result(rec, {"i": i, "pad": "y" * (each - 20)})
    store = StepResults(bus.js, ResultStore(bus.js))
    await store.store(state)

    inline = [n for n, rec in state.steps.items() if rec.result_key is None]
    assert 0 < state.inline_result_bytes() <= INLINE_BUDGET
    assert len(inline) == INLINE_BUDGET // len(jsonutil.dumps(state.steps["s0"].result))
    assert inline == [f"s{i}" for i in range(len(inline))]  # first come, first kept
    written = state.to_dict()
    assert all("result" not in written["steps"][n] for n in state.steps if n not in inline)

    again = ExecutionState.from_dict(written)
    await StepResults(bus.js, ResultStore(bus.js)).load(again)
    assert {n: r.result for n, r in again.steps.items()} == \
        {n: r.result for n, r in state.steps.items()}
    await store.store(again)  # a cold state keeps what it read inline, within the same budget
    assert [n for n, rec in again.steps.items() if rec.result_key is None] == inline


async def test_a_page_of_settled_records_carries_their_inline_results(bus: Bus) -> None:
    execution_id = new_execution_id()
    state = ExecutionState(execution_id=execution_id, playbook_key="k", workload={})
    for i in range(PAGE_SIZE + 5):
        rec = state.record(f"s{i}")
        rec.status, rec.runs = "completed", 1
        state.set_result(rec, {"i": i})
    written, sub = await _count_result_writes(bus, execution_id)
    await StepResults(bus.js, ResultStore(bus.js)).store(state)
    await bus.nc.flush()
    await sub.unsubscribe()

    committed = state.to_dict()
    assert len(committed["step_pages"]) == 1 and written == committed["step_pages"]
    assert sorted(committed["steps"]) == sorted(f"s{i}" for i in range(PAGE_SIZE, PAGE_SIZE + 5))
    page = await (await bus.js.key_value(BUCKET)).get(f"{execution_id}.{committed['step_pages'][0]}")
    assert jsonutil.loads(page.value or b"{}")["v"]["s7"]["result"] == {"i": 7}

    cold = ExecutionState.from_dict(committed)
    await StepResults(bus.js, ResultStore(bus.js)).load(cold)
    assert {n: r.result for n, r in cold.steps.items()} == \
        {f"s{i}": {"i": i} for i in range(PAGE_SIZE + 5)}
    assert isinstance(cold.steps["s7"], StepRecord) and cold.steps["s7"].result_key is None
