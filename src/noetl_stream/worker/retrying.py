"""Worker-side pieces of the `retry:` clause and `poll:`: waits, guard context, events.

Waits are a pure function of the rule, the attempt and the idempotency key, so a re-delivered
command waits exactly as long as the first delivery did (jitter is seeded by the key, never drawn
from a clock or a global generator). Events carry a stable `action_id` per task invocation
(spec 001 §4.4) and a message id made of it, the chain attempt, the poll round and the attempt, so
a re-run after a crash publishes nothing new.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Awaitable, Callable

from noetl_stream import ids
from noetl_stream.dsl.models import Rule
from noetl_stream.jsonutil import JsonObject
from noetl_stream.messages import Command, event_body
from noetl_stream.tools.base import Outcome

EventSink = Callable[[str, str, JsonObject], Awaitable[None]]
"""sink(event_type, msg_id, body): publish one worker event with a deterministic msg id."""


def jitter_fraction(key: str, attempt: int) -> float:
    """A number in [0, 1) fixed by the idempotency key and attempt."""
    digest = hashlib.sha256(f"{key}\0{attempt}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def backoff_delay(rule: Rule, attempt: int, key: str | None = None) -> float:
    """Wait before attempt `attempt + 1`; `delay` is the first wait (ARCHITECTURE §8 decisions).

    With `jitter` the wait is spread over [wait/2, wait] by `key`; `max_delay` caps the result.
    """
    wait = rule.backoff_wait(attempt)
    if rule.jitter and key is not None:
        wait = wait / 2 + wait / 2 * jitter_fraction(key, attempt)
    return float(min(wait, rule.max_delay) if rule.max_delay is not None else wait)


def retry_names(outcome: Outcome, attempt: int, rule: Rule | None = None) -> dict[str, object]:
    """The names a `retry_when` / `stop_when` / `poll.until` guard reads (spec 004 §7.3)."""
    error = outcome.error or {}
    status = (outcome.http or {}).get("status", error.get("status"))
    names: dict[str, object] = {"attempt": attempt, "status_code": status, "error": outcome.error,
             "success": outcome.ok, "result": outcome.result, "data": outcome.result}
    if rule is not None:
        names["max_attempts"] = rule.attempts
    return names


class ActionEvents:
    """Publishes `retry.*` and `poll.*` events of one command's pipeline through a sink."""

    def __init__(self, command: Command, sink: EventSink | None) -> None:
        self.cmd = command
        self.sink = sink

    def action_id(self, task: str | None) -> str:
        return ids.action_id(self.cmd.step_run_id, self.cmd.iteration, task)

    async def publish(self, event_type: str, task: str | None, *, chain: int, round_: int,
                      attempt: int, **fields: object) -> None:
        if self.sink is None:
            return
        action = self.action_id(task)
        execution_id = self.cmd.execution_id
        body = event_body(event_type, execution_id, time.time(),
                          parent_execution_id=self.cmd.parent_execution_id,
                          step=self.cmd.step, step_run_id=self.cmd.step_run_id,
                          iteration=self.cmd.iteration, task=task, action_id=action,
                          attempt=attempt, chain_attempt=chain, **fields)
        msg_id = ids.event_msg_id(execution_id, event_type, action, chain, round_, attempt)
        await self.sink(event_type, msg_id, body)


def outcome_fields(outcome: Outcome) -> JsonObject:
    """What a `retry.processed` / `poll.attempt` event says about a call: status, never data."""
    error = outcome.error or {}
    status = (outcome.http or {}).get("status", error.get("status"))
    return {"status": outcome.status, "status_code": status,
            "error": None if outcome.ok else error.get("message")}
