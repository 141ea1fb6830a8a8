"""Results outside the committed state (router/state.py): a result not stored yet is inline, a
stored one is named by its key only, and a loop's page leaves the state only once every
iteration of it has ended."""

from __future__ import annotations

from noetl_stream.router.state import PAGE_SIZE, ExecutionState, LoopState, StepRecord


def _state() -> ExecutionState:
    return ExecutionState(execution_id="1", playbook_key="k", workload={})


def test_a_result_not_stored_yet_is_inline_and_reads_back_as_not_stored() -> None:
    state = _state()
    rec = state.steps["a"] = StepRecord(status="completed", runs=1)
    state.set_result(rec, {"n": 1})

    written = state.to_dict()
    assert written["steps"]["a"]["result"] == {"n": 1} and written["steps"]["a"]["result_key"] is None
    again = ExecutionState.from_dict(written)
    assert again.steps["a"].result == {"n": 1}
    assert again.unstored() == [again.steps["a"]]
    assert again.unstored() == []  # handed out once


def test_a_stored_result_is_named_by_its_key_and_read_back_without_its_value() -> None:
    state = _state()
    rec = state.steps["a"] = StepRecord(status="completed", runs=1)
    state.set_result(rec, {"n": 1})
    for holder in state.unstored():
        holder.hold(holder.result, "abc")

    written = state.to_dict()
    assert "result" not in written["steps"]["a"] and written["steps"]["a"]["result_key"] == "abc"
    again = ExecutionState.from_dict(written)
    assert again.unloaded() == [again.steps["a"]] and again.unstored() == []


def test_a_page_waits_for_its_slowest_iteration() -> None:
    loop = LoopState(items=list(range(2 * PAGE_SIZE)), mode="parallel", max_in_flight=5,
                     next_index=PAGE_SIZE + 5, in_flight=[3, PAGE_SIZE + 4],
                     results={str(i): i for i in range(PAGE_SIZE + 4) if i != 3})
    assert loop.complete_page() is None  # iteration 3 is still running

    loop.in_flight.remove(3)
    loop.results["3"] = 3
    page = loop.complete_page()
    assert page is not None and sorted(page, key=int) == [str(i) for i in range(PAGE_SIZE)]
    loop.page_stored("p0", page)
    assert loop.pages == ["p0"] and sorted(loop.results, key=int) == [
        str(i) for i in range(PAGE_SIZE, PAGE_SIZE + 4)]
    assert loop.all_results() == {str(i): i for i in range(PAGE_SIZE + 4)}
    assert loop.complete_page() is None  # the second page is still filling
