"""The one interface every tool kind implements, and the outcome envelope it returns."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from noetl_stream.credentials import Credential
from noetl_stream.errors import OutcomeErrorKind
from noetl_stream.jsonutil import JsonObject

if TYPE_CHECKING:  # tools/ loads without nats-py; kinds that use NATS import it themselves
    from nats.aio.client import Client
    from nats.aio.msg import Msg


@dataclass(frozen=True)
class TaskCall:
    """A task with its templates already rendered: what a tool needs to act."""

    execution_id: str
    step: str
    task: str
    kind: str
    config: dict[str, Any]
    input: dict[str, Any]
    spec: dict[str, Any]
    idempotency_key: str
    attempt: int = 1
    timeout_s: float | None = None
    # The innermost loop iteration the task runs in (its `iter`, holding `parent` when nested),
    # None outside any loop; a child playbook started by the task reads it as `iter.parent`.
    iteration: JsonObject | None = None
    # The command the task runs in, as the router knows it: its step run and loop iteration
    # number (None outside a loop step). A child playbook names them so that the router can
    # cancel the child when it gives up on that command.
    step_run_id: str | None = None
    command_iteration: int | None = None
    # What the task's templates saw (workload, ctx, iter, vars, args, step results, pipeline
    # locals, keychain): handed to kinds that expose it to user code (python's `context`).
    context: Mapping[str, object] | None = None

    def timeout(self, default_s: float) -> float:
        """Seconds this call may take: the task's own `timeout`, else its effective
        `spec.timeout`, else the command's, else the kind's default.
        """
        return float(self.config.get("timeout") or self.spec.get("timeout") or self.timeout_s
                     or default_s)


@dataclass
class Outcome:
    """Spec 003 §5.3: status ok|error, result, error, meta, plus kind fields (http)."""

    status: str
    result: object = None
    error: dict[str, Any] | None = None
    http: dict[str, Any] | None = None
    meta: dict[str, object] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @classmethod
    def success(cls, result: object, *, http: dict[str, Any] | None = None,
                meta: Mapping[str, object] | None = None) -> Outcome:
        return cls("ok", result=result, http=http, meta=dict(meta or {}))

    @classmethod
    def failure(cls, message: str, kind: OutcomeErrorKind, *, retryable: bool = False,
                **fields: Any) -> Outcome:
        http = fields.pop("http", None)
        meta = fields.pop("meta", {})
        return cls("error", error={"message": message, "kind": kind, "retryable": retryable, **fields},
                   http=http, meta=meta)


class CredentialResolver(Protocol):
    """How tools turn an `auth:` alias into material (through the auth cache)."""

    async def resolve(self, name: str, *, execution_id: str | None = None) -> Credential:
        """Raise ToolError (with no secret in its text) when the name is unknown."""
        ...


class ResultSink(Protocol):
    """Where tools put bytes that must not travel inside events (object store `noetl_results`)."""

    async def put_binary(self, data: bytes, *, content_type: str | None) -> JsonObject:
        """Store `data`; return its reference `{"$ref": {store, key, size, checksum, ...}}`."""
        ...


class EventFollower(Protocol):
    """A live follower of some execution events (bus/event_feed.py's EventFeed)."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


# (filter subject, handler awaited for each message in order) -> a follower not yet started.
FollowEvents = Callable[[str, Callable[["Msg"], Awaitable[None]]], EventFollower]


@dataclass(frozen=True)
class ToolServices:
    """What the worker hands every tool kind at creation: shared clients and resolvers.

    `nats` is the worker's nats-py client and `home` the NOETL_STREAM_HOME folder.
    """

    credentials: CredentialResolver | None = None
    nats: Client | None = None
    home: Path | None = None
    prefix: str = "noetl"  # subject prefix, for tools that publish requests or follow events
    # The worker's pool: its requests for child executions go on the pool's own subjects
    # (server/child_requests.py), the only ones its NATS user may publish. None (a tool used
    # outside a worker) sends them as a client does.
    pool: str | None = None
    # Handed in by the runtime so tools/ never imports it (the sub-playbook tool waits on it).
    follow_events: FollowEvents | None = None
    results: ResultSink | None = None


class Tool(Protocol):
    """A tool kind. `run` never raises for a failure of the work itself: it returns an error outcome."""

    kind: str

    async def run(self, call: TaskCall) -> Outcome: ...

    async def close(self) -> None: ...


@runtime_checkable
class Claimer(Protocol):
    """A tool kind that can claim the items of a cursor loop (`loop.cursor`).

    `claim` runs the rendered claim SQL in `call.config` (`command`, with `auth` or `connection`)
    and returns `{"row": <the claimed row> or None, "replayed": bool}`. It claims at most once per
    `claim_key`: asked again with the same key it returns the same row (or None) without
    claiming, so a redelivered command finishes the item it had claimed.
    """

    async def claim(self, call: TaskCall, claim_key: str) -> Outcome: ...
