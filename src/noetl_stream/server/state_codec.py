"""An execution state as the bytes the server commits to KV `noetl_executions`.

A commit must fit one NATS message with its headers, and every value in it must be JSON. Before
encoding, the step results the state names by key are written beside it (state/step_results.py)
and large execution summaries in its outbox go by reference; a state still too large has its
largest values moved to the object store (server/state_size.py). What cannot be stored even so
raises `Unstorable`, which the server turns into the execution's failure with the reason.
"""

from __future__ import annotations

import logging

from nats.aio.client import Client

from noetl_stream.errors import TemplateError
from noetl_stream.formats import STATE, NewerFormat
from noetl_stream.jsonutil import JsonObject
from noetl_stream.router.state import ExecutionState
from noetl_stream.server.state_size import shrink
from noetl_stream.state.results import ResultStore
from noetl_stream.state.step_results import StepResults, summaries_by_reference

log = logging.getLogger("noetl_stream.server")

STATE_HEADROOM = 64 * 1024  # bytes of a NATS message kept for headers beside a committed state


class Unstorable(Exception):
    """A state JSON cannot hold, or one larger than a NATS message; `kind` is the error kind."""

    def __init__(self, message: str, kind: str, size: int = 0) -> None:
        super().__init__(message)
        self.kind = kind
        self.size = size  # bytes of the encoded state, for "too_large"


class StateCodec:
    """Encodes states for commit on one NATS connection (its max_payload is the limit)."""

    def __init__(self, nc: Client, results: ResultStore, step_results: StepResults) -> None:
        self._nc = nc
        self._results = results
        self._step_results = step_results

    def limit(self) -> int:
        """The server's max_payload less room for headers; 1 MiB (NATS' default) when unknown."""
        max_payload = getattr(self._nc, "max_payload", 0) or 1024 * 1024
        return int(max_payload) - STATE_HEADROOM

    def encode(self, state: ExecutionState) -> bytes:
        """The state as the bytes of its commit; raises Unstorable when JSON has no word for a
        value in it or it is larger than a NATS message. Its outbox is inside it, so every
        message it publishes fits too.
        """
        try:
            data = state.to_json()
        except (TypeError, ValueError) as exc:
            raise Unstorable(encoding_problem(exc), "value") from None
        limit = self.limit()
        if len(data) > limit:
            raise Unstorable(f"the execution's state would be {len(data)} bytes, more than the "
                             f"{limit} a NATS message may hold", "too_large", len(data))
        return data

    async def encode_fitting(self, state: ExecutionState) -> bytes:
        """`encode`, after writing the results the state names and making it fit if it can."""
        # Results first, so the state refers to them by key; their entries are written before
        # the state that names them is committed.
        try:
            await self._step_results.store(state)
        except (TypeError, ValueError) as exc:
            raise Unstorable(encoding_problem(exc), "value") from None
        # Half a message, as a state too large is shrunk to: the state holds its outbox too.
        await summaries_by_reference(state.outbox, self._results, self.limit() // 2)
        try:
            return self.encode(state)
        except Unstorable as exc:
            if exc.kind != "too_large":
                raise
            size = exc.size
        limit = self.limit()
        if not await shrink(state, self._results, size, limit // 2):
            raise Unstorable(f"the execution's state would be {size} bytes, more than the "
                             f"{limit} a NATS message may hold", "too_large", size)
        return self.encode(state)

    async def encoded(self, state: ExecutionState) -> bytes | None:
        """`encode_fitting`, or None when the state cannot be stored even so."""
        try:
            return await self.encode_fitting(state)
        except Unstorable as exc:
            log.warning("state of %s cannot be stored: %s", state.execution_id, exc)
            return None


def writable(state: ExecutionState) -> ExecutionState:
    """`state`, read to be applied to and written again; NewerFormat when a newer release wrote
    it: this one would drop what it does not know, so it never rewrites it (formats.py).
    """
    if state.schema_version > STATE.current:
        raise NewerFormat(f"the state of execution {state.execution_id}", state.schema_version,
                          STATE.current)
    return state


def encoding_problem(exc: Exception) -> str:
    """Why orjson refused a value, in the playbook author's words."""
    text = str(exc)
    if "64-bit" in text:
        return f"{text}: an integer beyond 64 bits cannot be stored (store it as a string)"
    if "ecursion" in text:
        return f"{text}: a value nested more than 250 levels deep cannot be stored"
    return f"a value cannot be stored as JSON: {text}"


def fault(exc: Exception) -> JsonObject:
    """The error an execution fails with when applying an event raised `exc`."""
    if isinstance(exc, Unstorable):
        return {"message": str(exc), "kind": exc.kind}
    if isinstance(exc, TemplateError):
        return {"message": str(exc), "kind": "template"}
    return {"message": f"{type(exc).__name__}: {exc}", "kind": "internal"}
