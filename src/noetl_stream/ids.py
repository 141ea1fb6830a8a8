"""Identifiers: deterministic execution ids and message ids. Pure: no clock, no randomness.

Fresh execution ids need a clock and are issued by the runtime shell
(`runtime/execution_ids.py`). The ids here are derived from other ids, so a redelivered command
or a repeated request always arrives at the same one. Every `Nats-Msg-Id` is derived from the
message's content identity so that re-publishing after a crash is dropped by the stream's
duplicate window (ARCHITECTURE §6.1).
"""

from __future__ import annotations

import hashlib

_INT63 = (1 << 63) - 1


def derived_execution_id(purpose: str, *parts: str) -> str:
    """A deterministic execution id: the first 63 bits of a SHA-256 over `purpose` and `parts`,
    as the decimal digits of a positive int64, like the ids the runtime issues, so it fits the
    same BIGINT columns. It is not time-ordered. `purpose` keeps ids made for different reasons
    from the same parts apart.
    """
    digest = hashlib.sha256("\0".join((purpose, *parts)).encode()).digest()
    return str(int.from_bytes(digest[:8], "big") & _INT63 or 1)


def step_run_id(execution_id: str, step: str, run: int) -> str:
    return f"{execution_id}.{step}.{run}"


def command_msg_id(step_run: str, iteration: int | None, attempt: int = 1) -> str:
    it = "-" if iteration is None else str(iteration)
    return f"cmd:{step_run}:{it}:{attempt}"


def event_msg_id(execution_id: str, event_type: str, *parts: object) -> str:
    """`evt:<execution>:<type>:<parts...>`; an absent part (no iteration) reads `-`, as in
    command ids, so an id never spells `None`.
    """
    return "evt:" + ":".join([execution_id, event_type,
                              *("-" if p is None else str(p) for p in parts)])


def is_subject_token(text: str) -> bool:
    return bool(text) and not any(c in text for c in ". *>\t\r\n")


def playbook_key(text: str) -> str:
    """Catalog key of a playbook text: the same text always gets the same key."""
    return "pb_" + hashlib.sha256(text.encode()).hexdigest()[:32]


def child_execution_id(parent_execution_id: str, idempotency_key: str) -> str:
    """Id of the child a `kind: playbook` task starts: the same for every delivery of one attempt
    of one task in one step run and iteration, so a redelivered command finds the child it already
    started instead of starting another. Numeric, like every id the runtime issues.
    """
    return derived_execution_id("child", parent_execution_id, idempotency_key)


def action_id(step_run: str, iteration: int | None, task: str | None) -> str:
    """Stable id of one task's invocation in one step run and iteration (spec 001 §4.4): every
    attempt, retry and poll round of it shares this id; `task=None` names the whole pipeline (a
    chain retry). A subject token.
    """
    it = "-" if iteration is None else str(iteration)
    name = "*" if task is None else f"t:{task}"
    return "act_" + hashlib.sha256(f"{step_run}\0{it}\0{name}".encode()).hexdigest()[:24]
