"""A committed state writes each step record's JSON made once until the record changes
(router/state.py `StepRecord.written`): the bytes are those of encoding the record afresh, and
every way the router changes a record is in the next commit."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from noetl_stream import jsonutil
from noetl_stream.router.state import PAGE_SIZE, ExecutionState, LoopState, Run, StepRecord


def _state() -> ExecutionState:
    return ExecutionState(execution_id="1", playbook_key="k", workload={})


def _fresh_json(state: ExecutionState) -> bytes:
    """The state encoded without any record's kept JSON: what to_json must write."""
    every = state.steps
    state.steps = {name: rec.as_written() for name, rec in state.written_records().items()}
    try:
        data = jsonutil.dumps(state)
    finally:
        state.steps = every
    if state.result_key is None and state.result is not None:
        data = data[:-1] + b',"result":' + jsonutil.dumps(state.result) + b"}"
    return data


def _settle(state: ExecutionState, name: str, result: Any = None) -> None:
    rec = state.record(name)
    rec.runs += 1
    rec.status = "completed"
    state.set_result(rec, result)


def test_an_unchanged_record_is_encoded_once_across_commits() -> None:
    state = _state()
    for n in range(5):
        _settle(state, f"s{n}", {"n": n} if n % 2 else None)
    first = state.to_json()
    kept = {name: rec._written for name, rec in state.steps.items()}
    assert all(isinstance(data, bytes) for data in kept.values())

    _settle(state, "s5")
    second = state.to_json()
    assert all(state.steps[name]._written is data for name, data in kept.items())
    assert orjson.loads(second)["steps"] == {**orjson.loads(first)["steps"],
                                             "s5": orjson.loads(second)["steps"]["s5"]}
    assert second == _fresh_json(state)


def test_every_change_through_the_state_is_in_the_next_commit() -> None:
    state = _state()
    _settle(state, "a", {"v": 1})
    _settle(state, "b")
    state.to_json()

    rec = state.record("a")  # the router's way to change a record
    rec.status, rec.error, rec.http = "failed", {"message": "boom"}, {"status": 500}
    state.to_json()
    state.record("b").runs += 1
    assert state.to_json() == _fresh_json(state)
    written = state.to_dict()["steps"]
    assert written["a"]["status"] == "failed" and written["a"]["error"] == {"message": "boom"}
    assert written["a"]["result"] == {"v": 1} and written["b"]["runs"] == 2

    state.set_result(state.steps["a"], {"v": 2})  # a new result
    assert state.to_dict()["steps"]["a"]["result"] == {"v": 2}
    state.steps["a"].hold({"v": 2}, "key-1")  # stored by key: the result leaves the state
    written = state.to_dict()["steps"]["a"]
    assert written["result_key"] == "key-1" and "result" not in written
    assert state.to_json() == _fresh_json(state)


def test_paged_records_stay_out_and_a_state_read_back_writes_the_same_bytes() -> None:
    state = _state()
    for n in range(PAGE_SIZE + 3):
        _settle(state, f"s{n}", {"i": n} if n % 3 == 0 else None)
        for holder in state.unstored():
            holder.keep_inline(8)
    state.to_json()
    page = state.complete_record_page()
    assert page is not None
    state.record_page_stored("page-1", page)
    data = state.to_json()
    assert data == _fresh_json(state)
    assert sorted(orjson.loads(data)["steps"]) == sorted(set(state.steps) - set(page))

    again = ExecutionState.from_dict(orjson.loads(data))
    assert again.to_json() == data


def test_a_record_json_cannot_hold_is_refused_and_not_kept() -> None:
    state = _state()
    _settle(state, "a", {"big": 1 << 70})
    with pytest.raises(TypeError):
        state.to_json()
    assert state.steps["a"]._written is None
    state.set_result(state.record("a"), {"big": "1180591620717411303424"})
    assert orjson.loads(state.to_json())["steps"]["a"]["result"] == {"big": "1180591620717411303424"}


def test_records_compare_equal_whether_or_not_their_json_was_made() -> None:
    state = _state()
    _settle(state, "a", {"v": 1})
    copy = ExecutionState.from_dict(state.to_dict())
    state.to_json()
    assert state.steps["a"]._written is not None and copy.steps["a"]._written is None
    assert state.steps["a"] == copy.steps["a"]
    assert isinstance(state.steps["a"], StepRecord)


def test_names_and_values_that_need_escaping_are_written_as_a_fresh_encoding_writes_them() -> None:
    state = _state()
    for name in ('étape "deux"', "tab\there", "back\\slash", "日本"):
        _settle(state, name, {"text": f"{name}\n\u2028", "n": [1.5, None, True]})
    data = state.to_json()
    assert data == _fresh_json(state)
    assert set(orjson.loads(data)["steps"]) == {'étape "deux"', "tab\there", "back\\slash", "日本"}


def test_a_loops_items_are_encoded_once_and_written_as_a_fresh_encoding_writes_them() -> None:
    items = [{"n": n, "text": f"é\t\"{n}\"\u2028"} for n in range(300)]
    state = _state()
    loop = LoopState(items=items, mode="parallel", max_in_flight=10)
    state.runs["r1"] = Run(run_id="r1", step="fan", run_no=1, args={}, loop=loop)
    first = state.to_json()
    kept = loop._items_json
    assert kept is not None and loop.items is items
    for n in range(5):
        loop.next_index, loop.done = n + 1, n
        loop.results[str(n)] = {"i": n}
        assert state.to_json() == _fresh_json(state)
        assert loop._items_json is kept and loop.items is items  # not encoded again
    assert orjson.loads(first)["runs"]["r1"]["loop"]["items"] == items
    assert ExecutionState.from_dict(state.to_dict()).to_json() == state.to_json()
