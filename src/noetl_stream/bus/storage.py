"""JetStream refusing to store a message: its disk (`max_file_store`), an account's JetStream
limit or a stream's `max_bytes` is full.

Such a refusal is not a crash and not a bad message: the write succeeds once space returns
(retention ages events out, an operator frees space, a bound is raised). So whoever meets it keeps
what it holds (a worker its command and the outcome it computed, the server the events of a
group) and writes again with backoff, holding its messages' leases, for up to
`NOETL_STREAM_STORAGE_RETRY_S` (default 600 s). No delivery is spent meanwhile, so a full disk
never turns a step into "delivered N times, worker crashed". Past the bound the caller gives up
with kind `storage` (docs/reliability.md, "A full disk").
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import errors as js_errors

from noetl_stream.errors import InfrastructureError
from noetl_stream.jsonutil import JsonValue
from noetl_stream.observe import metrics

log = logging.getLogger("noetl_stream.storage")

T = TypeVar("T")

ENV_STORAGE_RETRY_S = "NOETL_STREAM_STORAGE_RETRY_S"
DEFAULT_RETRY_S = 600.0
FIRST_WAIT_S = 0.5
MAX_WAIT_S = 15.0
KEEP_EVERY_S = 2.0  # leases are renewed this often while a write waits (AckWait may be short)

# JetStream's error codes for a write it has no room for: the server's store or an account's
# limit ("insufficient resources", "insufficient storage resources available", "resource
# limits exceeded for account"), and a stream at its own bound with discard new
# ("stream store failed: maximum bytes exceeded", or maximum messages).
INSUFFICIENT_RESOURCES = 10023
STORAGE_RESOURCES_EXCEEDED = 10047
ACCOUNT_RESOURCES_EXCEEDED = 10002
STREAM_STORE_FAILED = 10077
_FULL_CODES = frozenset({INSUFFICIENT_RESOURCES, STORAGE_RESOURCES_EXCEEDED,
                         ACCOUNT_RESOURCES_EXCEEDED})
_STREAM_FULL = ("maximum bytes", "maximum messages")


def storage_refusal(exc: BaseException) -> bool:
    """Whether `exc` is JetStream refusing a write for lack of room."""
    if not isinstance(exc, js_errors.APIError):
        return False
    # Some subclasses (KeyWrongLastSequenceError) are raised without the fields.
    code = getattr(exc, "err_code", None)
    if code in _FULL_CODES:
        return True
    description = str(getattr(exc, "description", None) or "").lower()
    return code == STREAM_STORE_FAILED and any(s in description for s in _STREAM_FULL)


def unanswered(exc: BaseException) -> bool:
    """Whether `exc` is a write nats-server never answered. A nats-server whose disk filled up
    answers no write to the stream it was writing then (nor, when it disabled JetStream, to any
    stream) until it is restarted; the write may also have been stored and its answer lost, so
    only a write under a msg id (a duplicate is dropped) may be made again for it.
    """
    return isinstance(exc, NatsTimeoutError | TimeoutError)


def describe(exc: BaseException) -> str:
    """One line naming the refusal as JetStream gave it."""
    if unanswered(exc):
        return ("JetStream answered no write (a nats-server whose disk filled up writes to that "
                "stream again only once it is restarted)")
    if isinstance(exc, js_errors.APIError):
        return (f"JetStream refused the write: {getattr(exc, 'description', None)} "
                f"(error {getattr(exc, 'err_code', None)})")
    return f"{type(exc).__name__}: {exc}"


def retry_bound_s() -> float:
    raw = os.environ.get(ENV_STORAGE_RETRY_S, "").strip()
    if not raw:
        return DEFAULT_RETRY_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if value < 0:
        raise InfrastructureError(f'{ENV_STORAGE_RETRY_S}="{raw}": a number of seconds, 0 or more')
    return value


@dataclass(frozen=True)
class HeldWrite:
    """A write this process keeps making while JetStream refuses it or does not answer."""

    what: str
    execution_id: str | None
    since: float
    reason: str


# The writes of this process that wait now, for its heartbeat (an operator's `status` reads them).
HELD: dict[int, HeldWrite] = {}


def held_writes() -> list[JsonValue]:
    """What this process holds, oldest first (at most 20), for its heartbeat."""
    held = sorted(HELD.values(), key=lambda h: h.since)[:20]
    return [{"what": h.what, "execution_id": h.execution_id, "since": h.since,
             "reason": h.reason} for h in held]


async def while_storage_refused(write: Callable[[], Awaitable[T]], *, what: str,
                                keep: Callable[[], Awaitable[None]] | None = None,
                                bound_s: float | None = None, retry_unanswered: bool = False,
                                execution_id: str | None = None) -> T:
    """`write()`, again after 0.5 s, 1 s, 2 s, ... (at most 15 s apart) while JetStream refuses
    it for lack of room, until `bound_s` (default: the environment's) has passed; then the last
    refusal is raised. `keep` runs every 2 s while it waits: it renews the leases of what the
    caller holds. With `retry_unanswered` (a write under a msg id), a write nats-server did not
    answer is made again the same way. Any other error is raised at once. While it waits, the
    write is listed in `HELD`, naming `execution_id`.
    """
    bound = retry_bound_s() if bound_s is None else bound_s
    deadline = time.monotonic() + bound
    wait = FIRST_WAIT_S
    refusals = 0
    token = id(write)
    try:
        while True:
            try:
                result = await write()
            except (js_errors.APIError, NatsTimeoutError, TimeoutError) as exc:
                held = storage_refusal(exc) or (retry_unanswered and unanswered(exc))
                if not held or time.monotonic() + wait > deadline:
                    raise
                refusals += 1
                metrics.STORAGE_REFUSALS.inc()
                if refusals == 1:
                    log.warning("%s: %s; writing again with backoff for up to %gs", what,
                                describe(exc), bound)
                    HELD[token] = HeldWrite(what, execution_id, time.time(), describe(exc))
                await _wait(wait, keep)
                wait = min(wait * 2, MAX_WAIT_S)
                continue
            if refusals:
                log.warning("%s: stored after %d refusal(s)", what, refusals)
            return result
    finally:
        HELD.pop(token, None)


async def _wait(seconds: float, keep: Callable[[], Awaitable[None]] | None) -> None:
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        if keep is not None:
            await keep()
        await asyncio.sleep(min(left, KEEP_EVERY_S))
