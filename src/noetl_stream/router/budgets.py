"""How long one command of a step may run before the router's watchdog fails it. Pure; found
once per playbook (router/graph.py).

A command's budget is what its tasks may legitimately take: each task's per-call timeout (the
step's, or the task's own where it overrides it) times the attempts its retry rules allow, plus
their backoff waits, plus a grace for the worker's own report to arrive first.
"""

from __future__ import annotations

from noetl_stream.dsl import layering
from noetl_stream.dsl.models import Playbook, Rule, Step, Task

GRACE_S = 2.0  # lets the worker's own timeout report win the race with the watchdog


def step_timeout_s(playbook: Playbook, step: Step) -> float | None:
    """The step's effective `spec.timeout` (without the kinds' defaults), or None."""
    loop_spec = step.loop.spec if step.loop is not None else {}
    spec = layering.merge(layering.layer_of(playbook.executor.get("spec"),
                                            layering.SCOPED_KEYS | layering.EXECUTOR_OWN_KEYS),
                          layering.layer_of(step.spec),
                          layering.layer_of(loop_spec,
                                            layering.SCOPED_KEYS | layering.LOOP_OWN_KEYS))
    seconds = layering.timeout_s(spec)
    return seconds if seconds is not None and seconds > 0 else None


def budget_s(playbook: Playbook, step: Step) -> float | None:
    """Seconds one command of `step` may run before the watchdog fails it; None: no watchdog."""
    base = step_timeout_s(playbook, step)
    if base is None:
        return None
    total = 0.0
    for task in step.tasks:
        per_call = layering.timeout_s(task.spec) or base
        attempts, waits = _retries(task)
        total += per_call * attempts + waits
    return max(total, base) + GRACE_S


def _retries(task: Task) -> tuple[int, float]:
    """Calls the task's most generous retry rule allows, and the longest its waits add up to."""
    best = (1, 0.0)
    for rule in task.rules:
        if rule.do != "retry":
            continue
        waits = sum(_wait(rule, attempt) for attempt in range(1, rule.attempts))
        if (rule.attempts, waits) > best:
            best = (rule.attempts, waits)
    return best


def _wait(rule: Rule, attempt: int) -> float:
    """The longest wait before attempt `attempt + 1` (jitter only ever shortens it)."""
    wait = rule.backoff_wait(attempt)
    return min(wait, rule.max_delay) if rule.max_delay is not None else wait
