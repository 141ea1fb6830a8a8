"""`run`'s progress printer does the same work for the 300th step as for the first: one line
written per shown event, and no look at the steps before it (counted, not timed)."""

from __future__ import annotations

import io
from collections.abc import Iterator

from noetl_stream.cli.progress import ProgressPrinter
from noetl_stream.jsonutil import JsonObject


class _CountingStream(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)


class _CountingDict(dict[str, float]):
    """The printer's start times, counting every look at them (a scan would count each key)."""

    def __init__(self) -> None:
        super().__init__()
        self.touched = 0

    def __setitem__(self, key: str, value: float) -> None:
        self.touched += 1
        super().__setitem__(key, value)

    def get(self, key: str, default: float | None = None) -> float | None:
        self.touched += 1
        return super().get(key, default)

    def __iter__(self) -> Iterator[str]:
        self.touched += len(self)
        return super().__iter__()


def _step_events(i: int) -> list[JsonObject]:
    run_id = f"e1.s{i}.1"
    base: JsonObject = {"execution_id": "e1", "step": f"s{i}", "step_run_id": run_id,
                        "timestamp": 1000.0 + i}
    return [{**base, "event_type": "step.started", "run": 1},
            {**base, "event_type": "task.started"},
            {**base, "event_type": "step.done", "status": "ok"}]  # no duration: from its start


def test_each_step_costs_the_printer_the_same_however_many_came_before() -> None:
    out = _CountingStream()
    printer = ProgressPrinter(out, color=False)
    printer.started = _CountingDict()
    started = printer.started
    costs: list[tuple[int, int]] = []
    for i in range(1, 301):
        writes, touched = out.writes, started.touched
        for event in _step_events(i):
            printer(event)
        costs.append((out.writes - writes, started.touched - touched))

    assert set(costs) == {(2, 2)}  # a line for its start and its end; its own entry set, read
    lines = out.getvalue().splitlines()
    assert lines[-2:] == [" 299.00s  ▶ s300", " 299.00s  ✓ s300  0 ms"]
