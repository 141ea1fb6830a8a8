"""NATS requests a tool makes again while a NATS node is away, for requests whose repetition is
harmless (a read, or a publish under a msg id that JetStream de-duplicates).

When a node of a cluster dies, a request in flight to it times out and the next ones find no
responder, no stream leader (503) or a connection that is reconnecting, for the few seconds the
client takes to reconnect and the cluster to elect leaders again. Failing the task on the first of
these would fail a step for the infrastructure's sake: `completed` and `failed` must be about the
work. So such a request is made again, with backoff, for up to BOUND_S; past it the last error is
raised and fails the task as before.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from nats.errors import (
    ConnectionReconnectingError,
    NoRespondersError,
)
from nats.errors import (
    TimeoutError as NatsTimeoutError,
)
from nats.js.errors import NoStreamResponseError, ServiceUnavailableError

BOUND_S = 60.0
FIRST_WAIT_S = 0.25
MAX_WAIT_S = 5.0

TRANSIENT = (NatsTimeoutError, NoRespondersError, ConnectionReconnectingError,
             NoStreamResponseError, ServiceUnavailableError)

T = TypeVar("T")
log = logging.getLogger(__name__)


async def patiently(request: Callable[[], Awaitable[T]], *, what: str,
                    bound_s: float = BOUND_S) -> T:
    """`request()`, made again after 0.25 s, 0.5 s, 1 s, ... (at most 5 s apart) while NATS
    answers it with a TRANSIENT error, until `bound_s` has passed; then that error is raised.
    """
    deadline = time.monotonic() + bound_s
    wait = FIRST_WAIT_S
    failures = 0
    while True:
        try:
            result = await request()
        except TRANSIENT as exc:
            if time.monotonic() + wait > deadline:
                raise
            failures += 1
            if failures == 1:
                log.warning("%s: %s: %s; asking again for up to %gs", what, type(exc).__name__,
                            exc, bound_s)
            await asyncio.sleep(wait)
            wait = min(wait * 2, MAX_WAIT_S)
            continue
        if failures:
            log.warning("%s: answered after %d attempt(s)", what, failures + 1)
        return result
