"""What an outcome event carries of each task's rendered call, within its size budget."""

from __future__ import annotations

from noetl_stream.worker.task_inputs import TaskInputs


def test_each_task_keeps_its_last_call() -> None:
    inputs = TaskInputs()
    inputs.record("fetch", "http", 1, {"url": "http://a/1"}, {})
    inputs.record("fetch", "http", 2, {"url": "http://a/2"}, {})
    inputs.record("shape", "python", 1, {"code": "result = n"}, {"n": 3})
    assert inputs.bounded() == {
        "fetch": {"kind": "http", "attempt": 2, "config": {"url": "http://a/2"}, "input": {}},
        "shape": {"kind": "python", "attempt": 1, "config": {"code": "result = n"},
                  "input": {"n": 3}}}


def test_past_the_budget_a_task_keeps_only_its_size() -> None:
    inputs = TaskInputs()
    inputs.record("small", "python", 1, {}, {"n": 1})
    inputs.record("big", "python", 1, {}, {"rows": "x" * 500})
    inputs.record("after", "python", 1, {}, {"n": 2})
    kept = inputs.bounded(budget=100)
    assert kept is not None
    assert kept["small"]["input"] == {"n": 1} and kept["after"]["input"] == {"n": 2}
    assert kept["big"] == {"kind": "python", "attempt": 1, "truncated": True, "bytes": 533}


def test_no_task_no_input() -> None:
    assert TaskInputs().bounded() is None


def test_bare_calls_count_their_encoded_size_against_the_budget() -> None:
    """A call with neither config nor input costs its `{"config":{},"input":{}}` (24 bytes),
    as any other call costs its encoding: 4 bare calls fit in 100 bytes, the 5th does not."""
    inputs = TaskInputs()
    for i in range(5):
        inputs.record(f"t{i}", "noop", 1, {}, {})
    kept = inputs.bounded(budget=100)
    assert kept is not None
    assert [kept[f"t{i}"].get("truncated", False) for i in range(5)] == [False] * 4 + [True]
    assert kept["t4"] == {"kind": "noop", "attempt": 1, "truncated": True, "bytes": 24}
