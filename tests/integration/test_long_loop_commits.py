"""A long execution's commits cost the same at its end as at its start: the keys of the pages a
loop (or an execution's settled records) has stored are folded FOLD at a time into entries of
KV `noetl_step_results` (router/page_index.py), so the state names few of them however many
there are, and a server that never saw the execution reads every page back through them. A
loop's items are stored there once too, so a commit does not write them again."""

from __future__ import annotations

import pytest

from noetl_stream import jsonutil
from noetl_stream.bus.connection import Bus
from noetl_stream.dsl import parse_playbook
from noetl_stream.router.page_index import FOLD
from noetl_stream.router.state import PAGE_SIZE, ExecutionState, LoopState, StepRecord
from noetl_stream.server.execution_ids import new_execution_id
from noetl_stream.state.results import ResultStore
from noetl_stream.state.step_results import StepResults
from noetl_stream.testing import Reply, RouterHarness
from noetl_stream.testing.router_harness import Command

pytestmark = pytest.mark.integration

IN_FLIGHT = 50
LOOP = f"""\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: long_loop}}
workload: {{items: []}}
workflow:
  - step: fan
    loop:
      in: "{{{{ workload.items }}}}"
      iterator: item
      spec: {{mode: parallel, max_in_flight: {IN_FLIGHT}}}
    tool: {{kind: noop}}
"""


def doubled(command: Command) -> Reply:
    return Reply(result=command["context"]["iter"]["item"] * 2)


def _loop(state: ExecutionState) -> LoopState:
    (run,) = state.runs.values()
    assert run.loop is not None
    return run.loop


def _keys_named(written: bytes) -> int:
    """The page keys a committed state's loop names."""
    (run,) = jsonutil.loads(written)["runs"].values()
    return len(run["loop"]["pages"]) + sum(len(keys) for keys in run["loop"].get("page_index", []))


async def test_a_long_loop_writes_as_many_bytes_per_commit_at_its_end_as_at_its_start(
        bus: Bus) -> None:
    """A loop of 31,000 iterations, each outcome applied and its results placed as a server does
    before a commit. Its state at iteration 10,550 and at 20,550 and 30,550 differs by a page key
    per 10,000 iterations; naming every page, it grew by 100 keys (about 3.5 kB) each time."""
    count = 31_000
    playbook = parse_playbook(LOOP, "long_loop.yaml").playbook
    harness = RouterHarness(playbook, execution_id=new_execution_id(),
                            workload={"items": list(range(count))})
    results = StepResults(bus.js, ResultStore(bus.js))
    sizes: dict[int, int] = {}
    named: dict[int, int] = {}
    for applied in range(1, count + 1):
        harness.answer(harness.pending[0], doubled(harness.pending[0]))
        await results.store(harness.state)
        if harness.state.status != "running":
            break
        if applied % 1_000 == 950 or applied % 10_000 == 550:
            written = harness.state.to_json()
            sizes[applied], named[applied] = len(written), _keys_named(written)
        if applied == 25_000:  # a server that never saw it carries on from the committed state
            again = ExecutionState.from_dict(harness.state.to_dict())
            await StepResults(bus.js, ResultStore(bus.js)).load(again)
            assert _loop(again).all_results() == _loop(harness.state).all_results()
            assert len(_loop(again).all_results()) == 25_000
            harness.state = again

    assert harness.state.status == "completed"
    assert harness.state.steps["fan"].result == [2 * i for i in range(count)]
    # Fewer than FOLD keys per level, three levels used below 1,000 pages: one key more per
    # 10,000 iterations at the same point of a page.
    assert max(named.values()) < 3 * FOLD, named
    same_point = [size for applied, size in sizes.items()
                  if applied > 10_000 and applied % 10_000 == 550]
    assert [size - same_point[0] for size in same_point] == pytest.approx([0, 0, 0], abs=100), \
        sizes


async def test_an_execution_of_many_settled_records_names_few_pages_and_reads_them_back(
        bus: Bus) -> None:
    count = PAGE_SIZE * FOLD + 30
    state = ExecutionState(execution_id=new_execution_id(), playbook_key="k", workload={})
    for n in range(count):
        rec = state.record(f"s{n}")
        rec.status, rec.runs = "completed", 1
        state.set_result(rec, {"n": n})
    await StepResults(bus.js, ResultStore(bus.js)).store(state)

    written = state.to_dict()
    assert len(written["steps"]) == 30
    assert written["step_pages"] == [] and [len(keys) for keys in written["step_page_index"]] == [1]
    again = ExecutionState.from_dict(written)
    assert again.record_pages_unloaded()
    await StepResults(bus.js, ResultStore(bus.js)).load(again)  # a cache that never saw it
    assert list(again.steps) == list(state.steps)
    assert all(isinstance(rec, StepRecord) and rec.result == {"n": n}
               for n, rec in enumerate(again.steps.values()))


FROM_A_STEP = f"""\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {{name: loop_of_a_result}}
workflow:
  - step: make
    tool: {{kind: noop}}
    next: fan
  - step: fan
    loop:
      in: "{{{{ make.items }}}}"
      iterator: item
      spec: {{mode: parallel, max_in_flight: {IN_FLIGHT}}}
    tool: {{kind: noop}}
"""


async def _committed_after(bus: Bus, items: int, applied: int) -> tuple[RouterHarness, bytes]:
    """A loop over `items` items a step returned, `applied` iterations in: its harness and the
    state a commit writes then."""
    playbook = parse_playbook(FROM_A_STEP, "loop_of_a_result.yaml").playbook
    harness = RouterHarness(playbook, execution_id=new_execution_id())
    results = StepResults(bus.js, ResultStore(bus.js))
    harness.answer(harness.pending[0], Reply(result={"items": list(range(items))}))
    await results.store(harness.state)
    for _ in range(applied):
        harness.answer(harness.pending[0], doubled(harness.pending[0]))
        await results.store(harness.state)
    return harness, harness.state.to_json()


async def test_a_commit_of_a_loop_writes_as_many_bytes_over_20000_items_as_over_2000(
        bus: Bus) -> None:
    _, small = await _committed_after(bus, 2_000, 150)
    harness, large = await _committed_after(bus, 20_000, 150)
    assert len(large) == pytest.approx(len(small), abs=100), (len(small), len(large))
    (run,) = jsonutil.loads(large)["runs"].values()
    assert run["loop"]["items"] == [] and isinstance(run["loop"]["items_key"], str)
    assert _loop(harness.state)._items_json is None  # their JSON is not kept once stored

    again = ExecutionState.from_dict(harness.state.to_dict())
    assert again.loops_without_items()
    await StepResults(bus.js, ResultStore(bus.js)).load(again)  # a cache that never saw it
    assert _loop(again).items == list(range(20_000)) and not again.loops_without_items()
    assert again.to_json() == large
