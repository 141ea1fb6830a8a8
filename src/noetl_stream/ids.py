"""Identifiers: execution ids (the one place randomness is allowed) and deterministic message ids.

Every `Nats-Msg-Id` is derived from the message's content identity so that re-publishing after a
crash is dropped by the stream's duplicate window (ARCHITECTURE §6.1).
"""

from __future__ import annotations

import os
import time

_ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"


def new_execution_id() -> str:
    """A time-ordered id that is a valid NATS subject token (no dots, no wildcards)."""
    millis = int(time.time() * 1000)
    head = ""
    for _ in range(10):
        head = _ALPHABET[millis % 32] + head
        millis //= 32
    tail = "".join(_ALPHABET[b % 32] for b in os.urandom(10))
    return head + tail


def step_run_id(execution_id: str, step: str, run: int) -> str:
    return f"{execution_id}.{step}.{run}"


def command_msg_id(step_run: str, iteration: int | None, attempt: int = 1) -> str:
    it = "-" if iteration is None else str(iteration)
    return f"cmd:{step_run}:{it}:{attempt}"


def event_msg_id(execution_id: str, event_type: str, *parts: object) -> str:
    return "evt:" + ":".join([execution_id, event_type, *(str(p) for p in parts)])


def is_subject_token(text: str) -> bool:
    return bool(text) and not any(c in text for c in ". *>\t\r\n")
