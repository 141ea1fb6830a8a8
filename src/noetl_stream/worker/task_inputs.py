"""What each task of a command was called with, rendered: the `input` an outcome event carries
so a person can read what a step ran on (the web UI's Input tab).

Recorded per task from its last call, after templates and a case `call` applied; secrets are
masked with the rest of the outcome (worker.py scrubs the whole body). The event stays small:
past `INPUT_EVENT_BYTES` a task's rendered values give way to their size.
"""

from __future__ import annotations

from typing import Any

from noetl_stream import jsonutil

INPUT_EVENT_BYTES = 64 * 1024  # rendered input one outcome event carries, all tasks together


class TaskInputs:
    """task name -> {kind, attempt, config, input} of its last call."""

    def __init__(self) -> None:
        self._calls: dict[str, dict[str, Any]] = {}

    def record(self, task: str, kind: str, attempt: int, config: dict[str, Any],
               inputs: dict[str, Any]) -> None:
        self._calls[task] = {"kind": kind, "attempt": attempt, "config": config, "input": inputs}

    def bounded(self, budget: int = INPUT_EVENT_BYTES) -> dict[str, dict[str, Any]] | None:
        """The calls within `budget` bytes (the first tasks first), or None when none ran."""
        if not self._calls:
            return None
        kept: dict[str, dict[str, Any]] = {}
        left = budget
        for name, call in self._calls.items():
            size = len(jsonutil.dumps({"config": call["config"], "input": call["input"]}))
            if size > left:
                call = {"kind": call["kind"], "attempt": call["attempt"], "truncated": True,
                        "bytes": size}
            else:
                left -= size
            kept[name] = call
        return kept
