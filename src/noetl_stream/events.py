"""The events on `<prefix>.events.<execution_id>.<event_type>`: one catalog, one model per type.

Every event published by the router, the server or a worker is a JSON object with the envelope
fields of `Event` (`event_id`, `event_type`, `execution_id`, `timestamp` as epoch seconds, `time`
as ISO-8601 UTC, `parent_execution_id`); the publishing layer (bus/publish.py `stamp`) adds
`event_id` and `time` where the producer left them out, so every producer gets them. Each type
adds its own fields. `schemas/events/<type>.schema.json` is generated from these models
(`python -m noetl_stream.schemas`); a test validates real published events against them, and
another keeps the README's list of event types equal to `EVENT_TYPES`.

Models allow fields they do not name: a consumer may rely on the fields named here, and new
fields can be added without breaking it. The router takes the types it applies as these models
(router_events.py `RouterEvent`); a failure's `error` is built as an `ErrorInfo`, whose kind is
one of errors.py `OutcomeErrorKind`. Signals (`signal.<name>`) are not in the catalog: their
body is the data a client published, never an envelope (bus/signals.py).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, SkipValidation, field_validator

from noetl_stream.errors import OutcomeErrorKind
from noetl_stream.jsonutil import JsonObject

# A JSON value inside an event: the body it came in was parsed from JSON and its depth checked
# (messages.parse_object), so a container's shape is validated but not each value in it again
# (walking a step's result value by value would cost more than the rest of decoding).
Json = SkipValidation[JsonValue]

# Stamped on every event that is published (bus/publish.py `stamp`), so the schemas require
# them; a body the router builds and applies in memory (the watchdog's outcome) has none yet.
STAMPED = ("event_id", "timestamp", "time")


def _stamped_required(schema: JsonObject) -> None:
    """The published schema of an event: the stamped fields required, never null."""
    properties, required = schema["properties"], schema.get("required", [])
    assert isinstance(properties, dict) and isinstance(required, list)
    for name in STAMPED:
        field = properties[name]
        assert isinstance(field, dict)
        branches = field.pop("anyOf")
        assert isinstance(branches, list)
        (kept,) = [b for b in branches if isinstance(b, dict) and b.get("type") != "null"]
        field.pop("default", None)
        properties[name] = {**field, **kept}
    schema["required"] = [name for name in properties if name in required or name in STAMPED]


class Event(BaseModel):
    """The envelope every event carries."""

    model_config = ConfigDict(extra="allow", json_schema_extra=_stamped_required)

    event_id: str | None = Field(None, description="Unique id of the event: its `Nats-Msg-Id` "
                                 "(the stream drops a second message with the same id within its "
                                 "duplicate window).")
    event_type: str = Field(description="The type; also the subject's tokens after the id.")
    execution_id: str = Field(description="The execution the event belongs to.")
    timestamp: float | None = Field(None, description="When it happened, epoch seconds (UTC).")
    time: str | None = Field(None, description="`timestamp` as ISO-8601 UTC, e.g. "
                             "2026-01-02T03:04:05.678901Z.",
                             pattern=r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")
    parent_execution_id: str | None = Field(None, description="The parent execution of a child "
                                            "playbook's events; null otherwise.")


class StepEvent(Event):
    step: str = Field(description="The step's name.")
    step_run_id: str = Field(description="`<execution_id>.<step>.<run>`: one run of the step.")


class IterationEvent(StepEvent):
    # Strict: `true` or `1.0` is no iteration number (True == 1 would match iteration 1).
    iteration: int | None = Field(None, strict=True,
                                  description="The loop iteration, or null outside loops.")


Status = Literal["ok", "error"]


class ErrorInfo(BaseModel):
    """The `error` of a failed outcome as its producer builds it: what went wrong and its kind
    (errors.py `OutcomeErrorKind`, so a kind nobody documented is a type error), with any fields
    of the kind's own (`pool`, `iteration`, `retryable`, `source`, ...).
    """

    model_config = ConfigDict(extra="allow", frozen=True)

    message: str = Field(description="What went wrong, for people.")
    kind: OutcomeErrorKind = Field(description="The class of the failure (errors.py).")


class OutcomeEvent(IterationEvent):
    """What a worker reports when a command ends (or the dead-letter service, for a lost one)."""

    status: Status
    result: Json = Field(None, description="The step's (or iteration's) result; a large one is a "
                        "reference to the object store (`{\"$ref\": ...}`).")
    error: dict[str, Json] | None = Field(None, description="`{message, kind, ...}` on failure.")
    ctx_patch: dict[str, Json] | None = Field(None, description="ctx keys the step set.")
    duration_ms: float | None = Field(None, description="How long the worker ran the command.")
    output: dict[str, TaskOutput] | None = Field(
        None, description="What each task wrote to stdout / stderr (python tasks), by task name; "
        "absent when nothing was written.")
    input: dict[str, dict[str, Json]] | None = Field(
        None, description="What each task was called with, by task name: `{kind, attempt, config, "
        "input}` after templates, secrets masked (a task past the size budget keeps only "
        "`truncated` and `bytes`); absent when no task ran.")
    pool: str | None = Field(None, description="The pool whose worker published it: the last "
                             "token of its subject (`...step.done.<pool>`); readers set it from "
                             "the subject, never from the body. The router takes an outcome "
                             "only from the pool it sent the command to.")
    http: dict[str, Json] | None = Field(None, description="An http task's response "
                                              "`{status, headers, ...}` (`<step>.http`).")
    route: str | None = Field(None, description="The route a case rule chose (`next`): only "
                              "the step's arcs with it fire.")
    case_matched: list[Json] | None = Field(None, description="A spec 001 case: the "
                                                 "branches the outcome found true.")
    cursor: dict[str, Json] | None = Field(None, description="A cursor loop iteration's "
                                                "claim; `exhausted: true` retires its slot.")

    @field_validator("error", mode="before")
    @classmethod
    def _error_as_mapping(cls, value: object) -> object:
        """An error that is not a mapping keeps its text (a worker that sent a bare string)."""
        if value is None or isinstance(value, dict):
            return value
        return {"message": str(value)}

    @field_validator("ctx_patch", "http", "cursor", mode="before")
    @classmethod
    def _mapping_or_none(cls, value: object) -> object:
        """What a step's outcome adds besides its result is taken only in its shape: a ctx patch,
        response or claim that is no mapping is none (the outcome itself still counts).
        """
        return value if isinstance(value, dict) else None

    @field_validator("route", mode="before")
    @classmethod
    def _route_or_none(cls, value: object) -> object:
        return value if isinstance(value, str) and value else None

    @field_validator("case_matched", mode="before")
    @classmethod
    def _list_or_none(cls, value: object) -> object:
        return value if isinstance(value, list) else None


class TaskOutput(BaseModel):
    """One task's captured output: the last bytes of each stream, with the whole size."""

    model_config = ConfigDict(extra="allow")

    stdout: str = Field(description="The tail of what the task printed (all of it unless truncated).")
    stderr: str = Field(description="The tail of what the task wrote to stderr.")
    stdout_bytes: int = Field(description="Bytes written to stdout in all, kept or not.")
    stderr_bytes: int = Field(description="Bytes written to stderr in all, kept or not.")
    truncated: bool = Field(description="True when a stream kept only its last bytes.")


class ExecutionEnd(Event):
    status: Literal["completed", "failed", "cancelled"]
    result: Json = None
    error: dict[str, Json] | None = None
    steps: dict[str, Json] = Field(description="Each step's status, runs and result.")
    ctx: dict[str, Json] = Field(default_factory=dict)
    vars: dict[str, Json] = Field(default_factory=dict)
    duration_ms: float | None = Field(None, description="From execution.started to this event.")
    restart: int = Field(0, description="The execution's restarts before this end (absent: 0).")


class ExecutionStarted(Event):
    playbook: str | None = Field(None, description="The playbook's metadata.name.")
    path: str | None = Field(None, description="The playbook's metadata.path.")
    file: str | None = Field(None, description="The file the request named the playbook by; "
                             "router-side template errors name it.")
    workload: dict[str, Json] = Field(description="The workload after the request's payload.")
    replay_of: str | None = Field(None, description="The execution this one replays.")
    replay: dict[str, Json] | None = Field(None, description="A replay's seed: the original "
                                          "(`of`), the steps run first (`roots`), the steps kept "
                                          "with their results (`steps`).")
    concurrency: dict[str, Json] | None = Field(
        None, description="The concurrency limit it starts under `{limit, key, on_limit, "
        "group}`: it waits for `execution.admitted` before its first step. Absent: none.")
    labels: dict[str, str] | None = Field(
        None, description="The request's labels (key -> value). Absent: none.")


class ConcurrencyEvent(Event):
    """An execution under a concurrency limit asks for a slot, or gives up its slot or place in
    line (router/admission.py); the servers' admission service acts on both.
    """

    group: str = Field(description="The playbook, with the rendered key in brackets if any.")
    key: str = Field(description="The rendered `concurrency.key` (empty without one).")
    limit: int = Field(description="At most this many executions of the group run at once.")
    on_limit: Literal["queue", "skip", "cancel_oldest"]
    status: str | None = Field(None, description="`concurrency.released`: how it ended.")


class SlaMissed(Event):
    """The execution ran past `executor.spec.sla.max_duration` and still runs (emitted once)."""

    playbook: str = Field(description="The playbook's path (else its name).")
    max_duration_s: float = Field(description="`sla.max_duration` in seconds.")
    elapsed_s: float = Field(description="Seconds since the request, when the SLA fired.")
    started_at: float = Field(description="When the request was taken, epoch seconds.")


class ExecutionRejected(Event):
    status: Literal["rejected"]
    errors: list[str]


class CancelRequested(Event):
    reason: str | None = None
    requested_by: str | None = None


class RestartRequested(Event):
    restart: int = Field(description="The restart asked for: 1 for the first (its msg id says it).")
    from_step: str | None = Field(None, description="The step to run again with everything "
                                  "downstream of it; null: the steps that failed or were cancelled.")
    workload: dict[str, Json] = Field(default_factory=dict,
                                     description="Merged over the workload for what runs again.")
    requested_by: str | None = None
    playbook_key: str | None = Field(None, description="Run this version of the playbook from "
                                     "now on (`restart --latest`); absent: the execution's own.")


class Restarted(Event):
    restart: int = Field(description="How many restarts the execution has had, this one included.")
    from_step: str | None = None
    steps: list[str] = Field(description="The steps that run again, in playbook order.")
    workload: dict[str, Json] = Field(default_factory=dict)
    requested_by: str | None = None
    playbook_key: str | None = Field(None, description="The version the execution runs from now "
                                     "on, when the restart changed it.")
    previous_playbook_key: str | None = Field(None, description="The version it ran before.")


class Replayed(Event):
    replay_execution_id: str = Field(description="The new execution that replays this one.")
    from_step: str | None = None
    requested_by: str | None = None


class ChildStarted(Event):
    child_execution_id: str
    step_run_id: str
    iteration: int | None = Field(None, strict=True)
    detached: bool


class StepStarted(StepEvent):
    run: int = Field(description="The run number of the step (1 unless it runs again).")


class StepSkipped(Event):
    step: str
    reason: str


class StepCancelled(StepEvent):
    reason: str | None = None


class StepTimeout(IterationEvent):
    reason: str
    timeout_s: float
    error: dict[str, Json]


class LoopStarted(StepEvent):
    total: int | None = Field(description="Items to run; null for a cursor loop.")
    max_in_flight: int | None = None


class LoopProgress(IterationEvent):
    done: int
    total: int | None = None
    ok: bool


class LoopEnd(StepEvent):
    status: Status
    error: dict[str, Json] | None = None


class TaskStarted(IterationEvent):
    pool: str = Field(description="The worker pool that took the command.")


class TaskRedelivered(TaskStarted):
    delivery: int = Field(description="How many times the command has been delivered.")


class ActionEvent(IterationEvent):
    """retry.* / poll.* / sink.*: what happened to one task call inside a command."""

    task: str | None = Field(description="The task; null for a retry of the whole pipeline.")
    action_id: str
    attempt: int
    chain_attempt: int


class CaseEvaluated(IterationEvent):
    matched: list[Json]


class NextEvaluated(StepEvent):
    selected: list[dict[str, Json]]


class BranchSuppressed(StepEvent):
    branch: str
    winner_branch: str | None = None


class EventIgnored(Event):
    ignored: str = Field(description="The type of the event no one took.")
    reason: str


class TimerFired(Event):
    """A durable timer (its schedule message reads as `timer.scheduled`): `timestamp` is when it
    is due to fire.
    """

    timer_id: str
    fire_at: float
    set_at: float | None = Field(None, description="When it was set; absent on a delayed arc's "
                                 "timer the stall check fires late (server/stalls.py), whose "
                                 "setting is not known.")
    step: str | None = None
    step_run_id: str | None = Field(None, description="The run a listener's or a watchdog's "
                                    "timer belongs to.")
    iteration: int | None = Field(None, strict=True,
                                  description="A watchdog's loop iteration, or null.")
    timeout_s: float | None = Field(None, description="A step watchdog's `spec.timeout`.")
    seconds: float | None = Field(None, description="An execution deadline's length (timeout, "
                                  "sla).")
    data: Json = Field(None, description="What a listener's guard reads as `event.data`.")
    seq: int | None = Field(None, description="Its stream sequence, set by the reader: a "
                            "listener skips a redelivered timer.")


class ExecutionAdmitted(Event):
    """An execution under a concurrency limit holds a slot: its first step fires now."""


class CredentialUsed(IterationEvent):
    """A worker checked a stored credential's scope for a task and recorded the use
    (worker/credential_guard.py); never any of its material.
    """

    credential: str = Field(description="The stored credential's name.")
    playbook: str | None = Field(description="The playbook's path (else its name) the scope was "
                                 "checked against.")
    via: str = Field(description="`auth` (a tool's auth: name or the secrets tool) or "
                     "`keychain.<entry>`.")
    granted: bool = Field(description="False when the scope refused it; the task then failed.")
    scoped: bool = Field(description="Whether the credential has a scope (false: any playbook).")


OutcomeEvent.model_rebuild()

# event type -> (model, what it means). The README's list is kept equal to these keys by a test.
EVENT_TYPES: dict[str, tuple[type[Event], str]] = {
    "execution.started": (ExecutionStarted, "the server accepted a request; the first step follows"),
    "execution.completed": (ExecutionEnd, "every branch ended well; carries the summary"),
    "execution.failed": (ExecutionEnd, "a failure nothing handled ended it"),
    "execution.cancelled": (ExecutionEnd, "it was cancelled"),
    "execution.rejected": (ExecutionRejected, "the request was refused (invalid playbook)"),
    "execution.admitted": (ExecutionAdmitted, "it holds a slot under its concurrency limit; its first "
                           "step follows"),
    "concurrency.requested": (ConcurrencyEvent, "it asks for a slot under a concurrency limit"),
    "concurrency.released": (ConcurrencyEvent, "it ended: its slot (or place in line) is free"),
    "sla.missed": (SlaMissed, "it ran past executor.spec.sla.max_duration (it goes on)"),
    "execution.cancel.requested": (CancelRequested, "someone asked to cancel it"),
    "execution.restart.requested": (RestartRequested, "someone asked to run it again from a "
                                    "step (or its failed steps)"),
    "execution.restarted": (Restarted, "the router reopened it; the steps named run again"),
    "execution.replayed": (Replayed, "a new execution replays it (`noetl-stream replay`)"),
    "child.started": (ChildStarted, "a task started a child playbook (in the parent's log)"),
    "step.started": (StepStarted, "a step run began"),
    "step.skipped": (StepSkipped, "a step's admission rule said no"),
    "step.done": (OutcomeEvent, "a step run succeeded"),
    "step.failed": (OutcomeEvent, "a step run failed"),
    "step.cancelled": (StepCancelled, "a running step was cut short"),
    "step.timeout": (StepTimeout, "a step's spec.timeout passed with no outcome"),
    "task.started": (TaskStarted, "a worker took the command (progress only)"),
    "task.redelivered": (TaskRedelivered, "a command came back after its worker went quiet"),
    "credential.used": (CredentialUsed, "a task asked for a stored credential; its scope "
                        "granted or refused it"),
    "loop.started": (LoopStarted, "a loop step began its iterations"),
    "loop.iteration.done": (OutcomeEvent, "one iteration succeeded"),
    "loop.iteration.failed": (OutcomeEvent, "one iteration failed"),
    "loop.progress": (LoopProgress, "the router counted an iteration"),
    "loop.done": (LoopEnd, "every iteration ended and the loop succeeded"),
    "loop.failed": (LoopEnd, "the loop failed"),
    "retry.started": (ActionEvent, "a task (or the chain) is retried after a delay"),
    "retry.processed": (ActionEvent, "a retried call ended"),
    "poll.started": (ActionEvent, "a task began polling until its condition holds"),
    "poll.attempt": (ActionEvent, "one polling round ended"),
    "poll.done": (ActionEvent, "the polling condition held"),
    "poll.timeout": (ActionEvent, "polling gave up"),
    "sink.started": (ActionEvent, "a sink began writing"),
    "sink.skipped": (ActionEvent, "a sink's condition said no"),
    "sink.processed": (ActionEvent, "a sink wrote"),
    "case.evaluated": (CaseEvaluated, "a spec 001 case found its branches"),
    "next.evaluated": (NextEvaluated, "a step chose the arcs it fires"),
    "case.branch.suppressed": (BranchSuppressed, "a branch lost to another (exclusive policy)"),
    "event.ignored": (EventIgnored, "a signal or timer no listener took"),
    "timer.scheduled": (TimerFired, "a durable timer was set (its message, stored on "
                        "`timer.schedule.<name>`, becomes `timer.fired` at `fire_at`)"),
    "timer.fired": (TimerFired, "a durable timer came due"),
}


def schema_file(event_type: str) -> str:
    return f"{event_type}.schema.json"


def event_types_table() -> str:
    """The Markdown table of event types the README shows (a test keeps them equal)."""
    rows = [f"| `{name}` | {meaning} |" for name, (_, meaning) in EVENT_TYPES.items()]
    return "\n".join(["| event type | what happened |", "| --- | --- |", *rows])
