"""Step results beside the state on a real nats-server: the committed state names each result by
key in KV `noetl_step_results`, a server that never saw the execution reads them back, a loop's
results leave the state a page at a time, and a summary too large for the payload limit carries
its steps by reference."""

from __future__ import annotations

import textwrap

import pytest
from paused_runs import committed_state, run_until_started

from noetl_stream import jsonutil, refs
from noetl_stream.bus.connection import Bus
from noetl_stream.bus.signals import publish_signal
from noetl_stream.errors import InfrastructureError
from noetl_stream.router.state import PAGE_SIZE, ExecutionState, LoopState, Outgoing, Run, StepRecord
from noetl_stream.server.execution_ids import new_execution_id
from noetl_stream.services import run_services, submit_and_watch
from noetl_stream.state.results import ResultStore
from noetl_stream.state.step_results import BUCKET, SMALL_RESULT, StepResults, summaries_by_reference

pytestmark = pytest.mark.integration

PAUSED = textwrap.dedent("""\
    apiVersion: noetl.io/v2
    kind: Playbook
    metadata: {name: paused}
    workflow:
      - step: start
        tool: {kind: python, code: 'result = {"n": 41, "pad": "x" * 3000}'}
        next: wait
      - step: wait
        eval_mode: on_event
        case:
          - when: "{{ event.name == 'signal.go' }}"
            then: {next: [last]}
      - step: last
        tool: {kind: noop, input: {n: "{{ start.n + 1 }}", size: "{{ start.pad | length }}"}}
    """)


async def test_a_server_that_never_saw_the_execution_reads_its_results_back(bus: Bus) -> None:
    execution_id = new_execution_id()
    watch, stored = await run_until_started(bus, PAUSED, "paused.yaml", execution_id, "wait")
    # The committed state names the result; it does not hold it.
    record = stored["steps"]["start"]
    assert "result" not in record and isinstance(record["result_key"], str)
    entry = await (await bus.js.key_value(BUCKET)).get(f"{execution_id}.{record['result_key']}")
    assert jsonutil.loads(entry.value or b"{}")["v"]["n"] == 41

    async with run_services(bus, python_children=1):  # a new server: nothing cached
        await publish_signal(bus, execution_id, "go", {})
        final = await watch
    assert final["status"] == "completed", final.get("error")
    assert final["result"] == {"n": 42, "size": 3000}
    assert final["steps"]["start"]["result"]["n"] == 41


async def test_loop_pages_are_stored_once_complete_and_read_back_cold(bus: Bus) -> None:
    """The store on its own: a loop of 250 iterations, all ended, keeps only the last partial
    page inline; a store with an empty cache reads the pages and every step result back."""
    items = list(range(250))
    loop = LoopState(items=items, mode="parallel", max_in_flight=10, next_index=250,
                     results={str(i): {"i": i} for i in items}, done=250)
    state = ExecutionState(execution_id=new_execution_id(), playbook_key="k", workload={})
    state.runs["r1"] = Run(run_id="r1", step="fan", run_no=1, args={}, loop=loop)
    first = state.steps["first"] = StepRecord(status="completed", runs=1)
    large = {"rows": ["a"] * 100, "pad": "x" * SMALL_RESULT}  # too large to stay inline
    state.set_result(first, large)
    state.set_result(state, large)

    await StepResults(bus.js, ResultStore(bus.js)).store(state)

    assert len(loop.pages) == 250 // PAGE_SIZE
    assert sorted(loop.results, key=int) == [str(i) for i in range(200, 250)]
    assert first.result_key is not None and first.result_key == state.result_key
    written = state.to_dict()
    assert "result" not in written and "result" not in written["steps"]["first"]

    again = ExecutionState.from_dict(written)
    assert again.steps["first"].result is None and again.unloaded_loops()
    await StepResults(bus.js, ResultStore(bus.js)).load(again)
    reloaded = again.runs["r1"].loop
    assert reloaded is not None and reloaded.all_results() == {str(i): {"i": i} for i in items}
    assert again.steps["first"].result == large == again.result


async def test_a_large_summary_carries_its_steps_by_reference(bus: Bus) -> None:
    """A summary over the limit sends `steps` to the object store, and `result` too while it is
    still over; a small one, or a message that is not an execution's end, is left alone."""
    steps = {f"s{i}": {"status": "completed", "runs": 1, "result": {"pad": "y" * 700}}
             for i in range(3)}
    large = {"execution_id": "1", "status": "completed", "result": {"pad": "y" * 700},
             "steps": steps}
    small = {"execution_id": "2", "status": "completed", "result": 1, "steps": {}}
    outbox = [Outgoing("event", "a", dict(large), event_type="execution.completed"),
              Outgoing("event", "b", dict(small), event_type="execution.completed"),
              Outgoing("event", "c", dict(large), event_type="step.done"),
              Outgoing("event", "d", dict(large), event_type="execution.failed")]
    objects = ResultStore(bus.js)

    await summaries_by_reference(outbox[:3], objects, 1024)
    await summaries_by_reference(outbox[3:], objects, 512)

    steps_only, both = outbox[0].body, outbox[3].body
    assert refs.ref_of(steps_only["steps"]) is not None
    assert steps_only["result"] == large["result"]  # under the limit once the steps went
    assert refs.ref_of(both["steps"]) is not None and refs.ref_of(both["result"]) is not None
    assert await objects.resolve(steps_only) == await objects.resolve(both) == large
    assert outbox[1].body == small and outbox[2].body == large


async def test_settled_step_records_leave_the_state_and_are_read_back_cold(bus: Bus) -> None:
    count = PAGE_SIZE + 20
    steps = "".join(f"  - step: s{i}\n    tool: {{kind: noop, input: {{i: {i}}}}}\n"
                    + (f"    next: s{i + 1}\n" if i < count else "") for i in range(1, count + 1))
    text = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: records}\nworkflow:\n" + steps
    async with run_services(bus):
        final = await submit_and_watch(bus, playbook_text=text, playbook_file="records.yaml",
                                       payload={}, on_event=lambda _e: None, timeout_s=120)
    assert final["status"] == "completed", final.get("error")

    committed = await committed_state(bus, final["execution_id"])
    assert len(committed["step_pages"]) == 1
    assert len(committed["steps"]) <= count - PAGE_SIZE
    state = ExecutionState.from_dict(committed)
    await StepResults(bus.js, ResultStore(bus.js)).load(state)  # a cache that never saw it
    assert len(state.steps) == count
    assert {name: state.steps[name].result for name in state.steps} == \
        {name: step["result"] for name, step in final["steps"].items()}


async def test_an_entry_whose_object_reference_is_malformed_is_named_not_misread(bus: Bus) -> None:
    execution_id = new_execution_id()
    kv = await bus.js.key_value(BUCKET)
    await kv.put(f"{execution_id}.k1", jsonutil.dumps({"schema_version": 2, "o": {"key": "x"}}))
    state = ExecutionState(execution_id=execution_id, playbook_key="pb", workload={},
                           result_key="k1")
    with pytest.raises(InfrastructureError, match=f'result "k1" of execution {execution_id} in '
                                                  f'"{BUCKET}" holds no object reference'):
        await StepResults(bus.js, ResultStore(bus.js)).load(state)
