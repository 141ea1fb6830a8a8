"""Every event type published on `<prefix>.events.<execution_id>.<event_type>`, in one place.

This table is the single source of event-type names for documentation and schemas: the README's
list is generated from it (`python -m noetl_stream.event_types`), and a test checks that README
and code agree with it (tests/unit/test_event_types.py).
"""

from __future__ import annotations

import sys

# name -> (who publishes it, what it says)
EVENT_TYPES: dict[str, tuple[str, str]] = {
    "execution.started": ("server", "the request was accepted and the execution began"),
    "execution.completed": ("server", "the execution ended well; carries its summary and result"),
    "execution.failed": ("server", "the execution ended with an unhandled failure"),
    "execution.cancelled": ("server", "the execution was cancelled; it has no result"),
    "execution.rejected": ("server", "the request was invalid; nothing ran"),
    "execution.cancel.requested": ("server", "a cancel request, applied in order by the router"),
    "step.started": ("server", "a step run began (its command was published)"),
    "step.done": ("worker", "a step run succeeded, with its result"),
    "step.failed": ("worker", "a step run failed, with its error"),
    "step.skipped": ("server", "a step was ruled out (admission, dead path)"),
    "step.cancelled": ("server", "a running step was cut short by a cancellation"),
    "step.timeout": ("server", "a step ran past its `spec.timeout`"),
    "task.started": ("worker", "a worker took a command (progress only)"),
    "task.redelivered": ("worker", "a command came back after its worker stopped answering"),
    "loop.started": ("server", "a loop step began, with its item count"),
    "loop.iteration.done": ("worker", "one iteration succeeded"),
    "loop.iteration.failed": ("worker", "one iteration failed"),
    "loop.progress": ("server", "iterations done so far"),
    "loop.done": ("server", "every iteration finished; the loop step succeeded"),
    "loop.failed": ("server", "the loop step failed"),
    "retry.started": ("worker", "a task or chain is retried after a wait"),
    "retry.processed": ("worker", "a retry clause decided (stop or go on)"),
    "poll.started": ("worker", "a task began polling"),
    "poll.attempt": ("worker", "one poll round"),
    "poll.done": ("worker", "polling ended with its condition met"),
    "poll.timeout": ("worker", "polling gave up"),
    "sink.started": ("worker", "a sink write began"),
    "sink.processed": ("worker", "a sink write finished"),
    "sink.skipped": ("worker", "a sink did not run (its condition was false)"),
    "case.evaluated": ("server", "a step's case rules were tried"),
    "case.branch.suppressed": ("server", "a case rule's branch was not taken"),
    "next.evaluated": ("server", "a step's outgoing arcs were decided"),
    "child.started": ("server", "a sub-playbook execution began for one of this one's steps"),
    "signal.<name>": ("any client", "an external signal (`noetl-stream signal`)"),
    "timer.scheduled": ("server", "a durable timer was set, with its `fire_at`"),
    "timer.fired": ("NATS", "a durable timer came due"),
    "event.ignored": ("server", "a signal or timer no listener took"),
}


def readme_lines() -> list[str]:
    """The README's event-type table."""
    lines = ["| event type | published by | what it says |", "| --- | --- | --- |"]
    lines += [f"| `{name}` | {who} | {what} |" for name, (who, what) in EVENT_TYPES.items()]
    return lines


if __name__ == "__main__":
    sys.stdout.write("\n".join(readme_lines()) + "\n")
