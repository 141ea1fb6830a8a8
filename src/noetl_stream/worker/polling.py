"""`Task.poll` on the worker: which task is being polled, its round, and how long it has run.

One pipeline polls at most one task at a time; starting another (or a chain re-run) forgets
the first. The deadline counts at least the intervals slept, so a clock that stepped no time
(a test's, or a suspended machine's) still gives up.
"""

from __future__ import annotations

from noetl_stream.dsl.models import PollSpec
from noetl_stream.worker.clock import Clock


class Polling:
    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.task: str | None = None  # the task being polled, if any
        self.round = 1
        self.started = 0.0
        self.waited = 0.0  # intervals slept so far

    def begin(self, task: str) -> None:
        self.task, self.round, self.started, self.waited = task, 1, self.clock.monotonic(), 0.0

    def stop(self) -> None:
        self.task = None

    def polls(self, task: str | None) -> bool:
        return task is not None and self.task == task

    def round_of(self, task: str | None) -> int:
        """The poll round a call of `task` belongs to: 1 for a task not being polled."""
        return self.round if self.polls(task) else 1

    def elapsed(self) -> float:
        return max(self.clock.monotonic() - self.started, self.waited)

    def gives_up(self, poll: PollSpec, elapsed: float) -> bool:
        """Whether another round would pass `max_attempts` or, `elapsed` seconds in, the deadline."""
        return ((poll.max_attempts is not None and self.round >= poll.max_attempts)
                or (poll.deadline is not None and elapsed + poll.interval > poll.deadline))

    async def next_round(self, poll: PollSpec) -> None:
        await self.clock.sleep(poll.interval)
        self.waited += poll.interval
        self.round += 1
