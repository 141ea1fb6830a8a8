"""What each task of a command was called with, rendered: the `input` an outcome event carries
so a person can read what a step ran on (the web UI's Input tab).

Recorded per task from its last call, after templates and a case `call` applied; secrets are
masked with the rest of the outcome (worker.py scrubs the whole body). The event stays small:
past `INPUT_EVENT_BYTES` a task's rendered values give way to their size.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NotRequired, TypedDict

from noetl_stream import jsonutil

INPUT_EVENT_BYTES = 64 * 1024  # rendered input one outcome event carries, all tasks together


class TaskInput(TypedDict):
    """One task's last call as the outcome event carries it (events.py `input`)."""

    kind: str
    attempt: int
    config: NotRequired[Mapping[str, object]]  # rendered, left out past the budget
    input: NotRequired[Mapping[str, object]]
    truncated: NotRequired[bool]  # past the budget: only the size of its values is kept
    bytes: NotRequired[int]


_NOTHING_SIZE = len(jsonutil.dumps({"config": {}, "input": {}}))  # a call of a bare task


class TaskInputs:
    """task name -> {kind, attempt, config, input} of its last call."""

    def __init__(self) -> None:
        self._calls: dict[str, TaskInput] = {}

    def record(self, task: str, kind: str, attempt: int, config: Mapping[str, object],
               inputs: Mapping[str, object]) -> None:
        self._calls[task] = {"kind": kind, "attempt": attempt, "config": config, "input": inputs}

    def bounded(self, budget: int = INPUT_EVENT_BYTES) -> dict[str, TaskInput] | None:
        """The calls within `budget` bytes (the first tasks first), or None when none ran."""
        if not self._calls:
            return None
        kept: dict[str, TaskInput] = {}
        left = budget
        for name, call in self._calls.items():
            config, inputs = call.get("config"), call.get("input")
            size = _NOTHING_SIZE if not config and not inputs else \
                len(jsonutil.dumps({"config": config, "input": inputs}))
            if size > left:
                call = {"kind": call["kind"], "attempt": call["attempt"], "truncated": True,
                        "bytes": size}
            else:
                left -= size
            kept[name] = call
        return kept
