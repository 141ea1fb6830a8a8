"""One log line per task call on the `noetl_stream.tasks` logger: `task started`, `task done`
and `task failed`, each with the execution id, step, task, kind, attempt and iteration, and the
duration once it ended, so a log shipper (Loki, ELK) shows runs without reading the stream.

All three are INFO, so `run`'s own progress is not interleaved with them; `--log-format json`
turns this logger on at INFO (logfmt.configure) since that is the format such shippers read.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext

from noetl_stream.jsonutil import JsonValue

LOGGER = "noetl_stream.tasks"
log = logging.getLogger(LOGGER)


Ended = Callable[[bool, Mapping[str, JsonValue] | None], None]


def _unlogged(ok: bool, error: Mapping[str, JsonValue] | None) -> None:
    return None


# While the logger is off: nothing to log at the start or the end, no generator made per call.
_QUIET: AbstractContextManager[Ended] = nullcontext(_unlogged)


def logged(*, execution_id: str, step: str, task: str, kind: str, attempt: int,
           iteration: int | None) -> AbstractContextManager[Ended]:
    """Log the start now; the callable it gives logs the end with its duration."""
    if not log.isEnabledFor(logging.INFO):
        return _QUIET
    return _logged({"execution_id": execution_id, "step": step, "task": task, "kind": kind,
                    "attempt": attempt, "iteration": iteration})


@contextmanager
def _logged(fields: dict[str, object]) -> Iterator[Ended]:
    log.info("task started", extra=fields)
    started = time.monotonic()

    def ended(ok: bool, error: Mapping[str, JsonValue] | None) -> None:
        done = {**fields, "duration_ms": round((time.monotonic() - started) * 1000, 3)}
        if ok:
            log.info("task done", extra=done)
            return
        error = error or {}
        log.info("task failed: %s", str(error.get("message", ""))[:500],
                    extra={**done, "error_kind": error.get("kind")})

    yield ended
