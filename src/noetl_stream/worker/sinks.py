"""Sinks in a pipeline (`Task.sink`, `Rule.sink`): how often each ran, and their events.

A sink stores a result without replacing it. Each run of a sink task counts, so its calls get
keys and message ids of their own (`:s<run>`); `sink.started` / `sink.skipped` say whether its
`when` admitted it, `sink.processed` what the write did.
"""

from __future__ import annotations

from noetl_stream.dsl.models import Task
from noetl_stream.tools.base import Outcome
from noetl_stream.worker.retrying import ActionEvents, outcome_fields


def affected_rows(outcome: Outcome) -> object:
    """What a `sink.processed` event says about the write: the SQL kinds' row count, if any."""
    result = outcome.result
    return result.get("affected_rows", result.get("row_count")) if isinstance(result, dict) else None


class SinkRuns:
    def __init__(self, events: ActionEvents) -> None:
        self.events = events
        self.runs: dict[str, int] = {}  # sink task -> calls so far

    def run_of(self, task: str) -> int:
        """The current run of a sink task (1 before its first)."""
        return self.runs.get(task, 1)

    async def admit(self, task: Task, admitted: bool, chain: int) -> bool:
        """Count one more run of a sink and publish `sink.started`, or say it is skipped."""
        assert task.sink is not None
        runs = self.runs[task.name] = self.runs.get(task.name, 0) + 1
        await self.events.publish("sink.started" if admitted else "sink.skipped", task.name,
                                  chain=chain, round_=runs, attempt=1, kind=task.kind,
                                  source=task.sink.source)
        return admitted

    async def processed(self, task: Task, attempt: int, outcome: Outcome, chain: int) -> None:
        assert task.sink is not None
        await self.events.publish("sink.processed", task.name, chain=chain,
                                  round_=self.run_of(task.name), attempt=attempt,
                                  kind=task.kind, source=task.sink.source,
                                  **outcome_fields(outcome), affected_rows=affected_rows(outcome))
