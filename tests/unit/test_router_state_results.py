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


def _settled(state: ExecutionState, count: int, status: str = "completed") -> None:
    for i in range(count):
        rec = state.record(f"s{i}")
        rec.status, rec.runs = status, 1  # type: ignore[assignment]
        state.set_result(rec, {"i": i})
    for holder in state.unstored():
        holder.hold(holder.result, f"key{id(holder)}")


def test_settled_records_leave_the_state_a_page_at_a_time_and_read_back_in_order() -> None:
    state = _state()
    _settled(state, PAGE_SIZE + 3)
    state.record("busy").status = "running"

    page = state.complete_record_page()
    assert page is not None and list(page) == [f"s{i}" for i in range(PAGE_SIZE)]
    state.record_page_stored("p0", page)
    assert state.complete_record_page() is None  # three settled inline: not a page yet
    written = state.to_dict()
    assert written["step_pages"] == ["p0"]
    assert sorted(written["steps"]) == sorted(["busy", *(f"s{i}" for i in range(PAGE_SIZE, PAGE_SIZE + 3))])
    assert len(state.steps) == PAGE_SIZE + 4  # in memory the router still sees every record

    again = ExecutionState.from_dict(written)
    assert again.record_pages_unloaded()
    again.record_pages_loaded([page])
    assert list(again.steps)[:2] == ["s0", "s1"] and len(again.steps) == PAGE_SIZE + 4
    assert again.steps["s5"].result_key == state.steps["s5"].result_key
    assert again.to_dict() == written  # the paged records stay out of what it writes


def test_a_record_changed_after_its_page_is_written_inline_and_wins_over_the_page() -> None:
    state = _state()
    _settled(state, PAGE_SIZE)
    page = state.complete_record_page()
    assert page is not None
    state.record_page_stored("p0", page)

    state.record("s7").runs = 2  # a back-edge fired it again
    written = state.to_dict()
    assert list(written["steps"]) == ["s7"] and written["steps"]["s7"]["runs"] == 2
    again = ExecutionState.from_dict(written)
    again.record_pages_loaded([page])
    assert again.steps["s7"].runs == 2 and again.steps["s8"].runs == 1


def test_a_record_whose_result_is_not_stored_or_whose_step_runs_is_not_paged() -> None:
    state = _state()
    _settled(state, PAGE_SIZE - 1)
    state.record("running").status = "running"
    assert state.complete_record_page() is None
    late = state.record("late")
    late.status = "completed"
    state.set_result(late, {"late": True})  # not stored yet
    assert state.complete_record_page() is None
    for holder in state.unstored():
        holder.hold(holder.result, "late-key")
    page = state.complete_record_page()
    assert page is not None and "late" in page and "running" not in page


def test_a_result_kept_inline_is_written_at_every_commit_and_leaves_with_its_record_page() -> None:
    state = _state()
    for i in range(PAGE_SIZE + 1):
        rec = state.record(f"s{i}")
        rec.status = "completed"
        rec.runs = 1
        state.set_result(rec, {"i": i})
    state.set_result(state, {"done": True})
    assert state.complete_record_page() is None  # no result placed yet
    for holder in state.unstored():
        holder.keep_inline(len(str(holder.result)))

    written = state.to_dict()  # the placing is over: the next commits write them inline too
    assert written["result"] == {"done": True} and written["steps"]["s3"]["result"] == {"i": 3}
    assert state.inline_result_bytes() == sum(len(str({"i": i})) for i in range(PAGE_SIZE + 1)) \
        + len(str({"done": True}))
    page = state.complete_record_page()
    assert page is not None and page["s3"] == {"status": "completed", "runs": 1, "error": None,
                                               "http": None, "loop": False, "result_key": None,
                                               "result": {"i": 3}}
    state.record_page_stored("p0", page)
    assert list(state.to_dict()["steps"]) == [f"s{PAGE_SIZE}"]
    assert state.inline_result_bytes() == len(str({"i": PAGE_SIZE})) + len(str({"done": True}))

    again = ExecutionState.from_dict(state.to_dict())
    assert again.result == {"done": True} and again.steps[f"s{PAGE_SIZE}"].result == {"i": PAGE_SIZE}
    again.record_pages_loaded([page])
    assert again.steps["s3"].result == {"i": 3} and again.steps["s3"].result_key is None
    assert again.to_dict() == state.to_dict()  # paged records stay out, inline ones stay in


def test_a_record_with_its_result_inline_is_written_as_it_is_after_each_change() -> None:
    state = _state()
    rec = state.record("a")
    rec.status = "running"
    state.set_result(rec, {"n": 1})
    for holder in state.unstored():
        holder.keep_inline(7)
    assert state.to_dict()["steps"]["a"] == {"status": "running", "runs": 0, "error": None,
                                             "http": None, "loop": False, "result_key": None,
                                             "result": {"n": 1}}
    state.record("a").status = "completed"
    state.set_result(state.record("a"), {"n": 2})
    assert state.to_dict()["steps"]["a"]["status"] == "completed"
    assert state.to_dict()["steps"]["a"]["result"] == {"n": 2}
    for holder in state.unstored():
        holder.hold(holder.result, "k2")
    assert "result" not in state.to_dict()["steps"]["a"]
    assert state.to_dict()["steps"]["a"]["result_key"] == "k2"
