"""Identifiers: deterministic execution ids and message ids. Pure: no clock, no randomness.

Fresh execution ids need a clock and are issued by the runtime shell
(`server/execution_ids.py`). The ids here are derived from other ids, so a redelivered command
or a repeated request always arrives at the same one. Every `Nats-Msg-Id` is derived from the
message's content identity so that re-publishing after a crash is dropped by the stream's
duplicate window (ARCHITECTURE §6.1).
"""

from __future__ import annotations

import hashlib
import re

_INT63 = (1 << 63) - 1
# One identifier that becomes a subject token or a KV key: an execution id, a pool, a part of a
# signal name. messages.py says why 128.
MAX_TOKEN_LENGTH = 128
# A step name travels in bodies and msg ids (headers), never in a subject: more room.
MAX_STEP_NAME_LENGTH = 256
_SAFE_TOKEN = re.compile(rf"[A-Za-z0-9_-]{{1,{MAX_TOKEN_LENGTH}}}")


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
    """A safe identifier: 1 to 128 letters, digits, `-` and `_`, so it is one subject token,
    a valid KV key, and short enough for any subject built from it.
    """
    return _SAFE_TOKEN.fullmatch(text) is not None


def request_msg_id(execution_id: str, body: bytes | None = None) -> str:
    """`Nats-Msg-Id` of an execution request: `req:<id>`, so sending one request twice starts
    one execution. With `body` (`req:<id>:<digest>`), another body under the same id is another
    message, which the server answers as a conflict (server/request_rpc.py).
    """
    if body is None:
        return f"req:{execution_id}"
    return f"req:{execution_id}:{hashlib.sha256(body).hexdigest()[:16]}"


def cancel_msg_id(execution_id: str, restarts: int = 0) -> str:
    """`Nats-Msg-Id` of a cancel request: asking twice within the window is asking once; after
    a restart (router/restart.py) the execution can be cancelled again, so its number counts.
    """
    return f"cancel:{execution_id}" + (f":{restarts}" if restarts else "")


def signal_msg_id(execution_id: str, name: str, idempotency_key: str) -> str:
    """`Nats-Msg-Id` of a signal sent with an `Idempotency-Key`: the same key is one signal."""
    return f"sig:{execution_id}:{name}:" + hashlib.sha256(idempotency_key.encode()).hexdigest()[:32]


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
