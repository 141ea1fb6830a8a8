"""Every message that crosses a process boundary, as a pydantic model (exported to `schemas/`),
and the one constructor of each message this package produces.

Requests (`ExecutionRequest`, `CancelRequest`), commands (`Command`), events (`EventEnvelope`,
the catalog of each type's fields is noetl_stream/events.py) and signals (`SignalEvent`) are
validated where they are received (server/server.py, worker/worker.py) before anything acts
on them. Identifiers are limited to a safe charset and length, JSON values to a depth and to
64-bit integers, so that no single message can build a subject, KV key or header that NATS
refuses (nats-server closes a connection whose control line passes 4096 bytes) or state that
cannot be stored.

Pure: no clock, no I/O (the router imports the constructors).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal, TypeVar, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    PlainValidator,
    ValidationError,
    WithJsonSchema,
)
from pydantic_core import PydanticCustomError

from noetl_stream import ids, jsonutil
from noetl_stream.dsl.task_list import TaskList
from noetl_stream.events import ErrorInfo

# -- identifiers ---------------------------------------------------------------------------
# 128 characters for one identifier: an int64 id has 19 digits, a UUID 36, a step or signal name
# a person writes rarely 40. A subject holds at most an id and an event type (with a signal's
# name) beside the prefix, so it stays under 400 bytes, and a PUB/HPUB control line (subject,
# reply inbox and sizes) under 1 KiB: a quarter of nats-server's 4096-byte limit, whatever the
# reply inbox a client chose (itself limited to MAX_SUBJECT_LENGTH).
MAX_ID_LENGTH = ids.MAX_TOKEN_LENGTH
MAX_NAME_LENGTH = ids.MAX_TOKEN_LENGTH
MAX_STEP_NAME_LENGTH = ids.MAX_STEP_NAME_LENGTH
MAX_STEP_RUN_ID_LENGTH = MAX_ID_LENGTH + MAX_STEP_NAME_LENGTH + 24
MAX_EVENT_TYPE_LENGTH = MAX_NAME_LENGTH + 32  # `signal.<name>`, `timer.schedule.<name>`
MAX_SUBJECT_LENGTH = 256  # a reply_to
MAX_TEXT_LENGTH = 4096  # reasons, who asked, file names in messages
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
# A step's value may nest jsonutil.MAX_DEPTH levels; the message around it a few more
# (a command's `context.steps.<name>`, an event's `result`).
MESSAGE_DEPTH = jsonutil.MAX_DEPTH + 16
# A signal's data as JSON. Any client may send signals, and each is stored in the events stream
# (and copied for the router): a listener needs a decision and a few fields, not a document.
MAX_SIGNAL_BYTES = 64 * 1024

_EVENT_TYPE = re.compile(r"[a-z][a-z0-9_-]*(\.[A-Za-z0-9_-]+)+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_SUBJECT = re.compile(r"[A-Za-z0-9_$=:/@+-]+(\.[A-Za-z0-9_$=:/@+-]+)*")


def execution_id_problem(value: str) -> str | None:
    if ids.is_subject_token(value):
        return None
    if len(value) > MAX_ID_LENGTH:
        return f"an execution id has at most {MAX_ID_LENGTH} characters (this one {len(value)})"
    return "an execution id is letters, digits, '-' and '_' (it names a subject token and a " \
           "KV key)"


def _execution_id(value: str) -> str:
    problem = execution_id_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


def signal_name_problem(value: str) -> str | None:
    if len(value) > MAX_NAME_LENGTH:
        return f"a signal name has at most {MAX_NAME_LENGTH} characters (this one {len(value)})"
    if not value or not all(ids.is_subject_token(part) for part in value.split(".")):
        return "a signal name is letters, digits, '-' and '_', in parts joined by dots"
    return None


def _signal_name(value: str) -> str:
    problem = signal_name_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


def _event_type(value: str) -> str:
    if len(value) > MAX_EVENT_TYPE_LENGTH or not _EVENT_TYPE.fullmatch(value):
        raise ValueError(f"an event type is dotted lower-case words (`step.done`, "
                         f"`signal.<name>`), at most {MAX_EVENT_TYPE_LENGTH} characters")
    return value


def _pool(value: str) -> str:
    if not ids.is_subject_token(value):
        raise ValueError(f"a pool name is letters, digits, '-' and '_', at most "
                         f"{MAX_NAME_LENGTH} characters")
    return value


def _printable(limit: int, what: str) -> Callable[[str], str]:
    def check(value: str) -> str:
        if not value or len(value) > limit or _CONTROL.search(value):
            raise ValueError(f"{what} has 1 to {limit} characters and no control characters")
        return value
    return check


def _reply_subject(value: str) -> str:
    if len(value) > MAX_SUBJECT_LENGTH or not _SUBJECT.fullmatch(value):
        raise ValueError(f"reply_to is a NATS subject without wildcards, at most "
                         f"{MAX_SUBJECT_LENGTH} characters")
    return value


def bounded_json_problem(value: object, depth: int = MESSAGE_DEPTH) -> str | None:
    """Why `value` cannot travel in a message, or None: nested deeper than `depth`, or an
    integer beyond 64 bits (JSON here holds 64-bit integers).
    """
    return jsonutil.storable_problem(value, depth)


V = TypeVar("V")


def _bounded(value: V) -> V:
    problem = bounded_json_problem(value)
    if problem is not None:
        raise ValueError(problem)
    return value


def _string(pattern: str | None, max_length: int, description: str) -> WithJsonSchema:
    schema: dict[str, JsonValue] = {"type": "string", "minLength": 1, "maxLength": max_length,
                              "description": description}
    if pattern is not None:
        schema["pattern"] = pattern
    return WithJsonSchema(schema)


_TOKEN = "[A-Za-z0-9_-]+"
ExecutionId = Annotated[str, AfterValidator(_execution_id), _string(
    f"^{_TOKEN}$", MAX_ID_LENGTH, "An execution id: letters, digits, '-' and '_'.")]
SignalName = Annotated[str, AfterValidator(_signal_name), _string(
    rf"^{_TOKEN}(\.{_TOKEN})*$", MAX_NAME_LENGTH, "A signal name: safe tokens joined by dots.")]
EventType = Annotated[str, AfterValidator(_event_type), _string(
    _EVENT_TYPE.pattern.join("^$"), MAX_EVENT_TYPE_LENGTH, "An event type: `step.done`, "
    "`signal.<name>`, ...")]
Pool = Annotated[str, AfterValidator(_pool), _string(
    f"^{_TOKEN}$", MAX_NAME_LENGTH, "A worker pool: letters, digits, '-' and '_'.")]
StepName = Annotated[str, AfterValidator(_printable(MAX_STEP_NAME_LENGTH, "a step name")),
                     _string("^[^\\x00-\\x1f\\x7f-\\x9f]+$", MAX_STEP_NAME_LENGTH,
                             "A step name: no control characters.")]
StepRunId = Annotated[str, AfterValidator(_printable(MAX_STEP_RUN_ID_LENGTH, "a step run id")),
                      _string("^[^\\x00-\\x1f\\x7f-\\x9f]+$", MAX_STEP_RUN_ID_LENGTH,
                              "`<execution_id>.<step>.<run>`.")]
Text = Annotated[str, AfterValidator(_printable(MAX_TEXT_LENGTH, "the text")), _string(
    "^[^\\x00-\\x1f\\x7f-\\x9f]+$", MAX_TEXT_LENGTH, "Text without control characters.")]
ReplySubject = Annotated[str, AfterValidator(_reply_subject), _string(
    _SUBJECT.pattern.join("^$"), MAX_SUBJECT_LENGTH, "A NATS subject without wildcards.")]
Int64 = Annotated[int, Field(strict=True, ge=INT64_MIN, le=INT64_MAX)]
_DEPTH_NOTE = (f"Any JSON value nested at most {MESSAGE_DEPTH} levels, integers within 64 bits.")
Json = Annotated[Any, AfterValidator(_bounded), WithJsonSchema({"description": _DEPTH_NOTE})]
JsonObject = Annotated[dict[str, Any], AfterValidator(_bounded),
                      WithJsonSchema({"type": "object", "description": _DEPTH_NOTE})]
MAX_LABELS = 32
LabelKey = Annotated[str, Field(pattern=r"^[A-Za-z0-9][-A-Za-z0-9_./]{0,62}$")]
LabelValue = Annotated[str, AfterValidator(_printable(256, "a label's value")), _string(
    "^[^\\x00-\\x1f\\x7f-\\x9f]+$", 256, "A label's value: text without control characters.")]
Labels = Annotated[dict[LabelKey, LabelValue], Field(max_length=MAX_LABELS, description=(
    f"Free labels to find executions by, key -> value (at most {MAX_LABELS}; keys: letters, "
    "digits and `-_./`, at most 63 characters; values: at most 256 characters)."))]


# -- requests -------------------------------------------------------------------------------
class SeededStep(BaseModel):
    """A step a replay does not run: the status and result its original recorded."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    status: Literal["completed", "skipped"]
    result: Json = None


class ReplaySeed(BaseModel):
    """What a replay starts from (router/replay.py): the original, the steps to run first, and
    the results of the steps it keeps.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    of: ExecutionId = Field(description="The execution replayed.")
    from_step: StepName | None = Field(None, description="The step asked for; null: where the "
                                       "original stopped (or its start step).")
    roots: list[StepName] = Field(min_length=1, description="The steps that run first.")
    steps: dict[StepName, SeededStep] = Field(default_factory=dict, description="Steps not run "
                                              "again, with the original's results.")


class ExecutionRequest(BaseModel):
    """Body of a message on `noetl.requests.execute`: start one execution of a playbook."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    execution_id: ExecutionId | None = Field(
        None, description="Id to use (letters, digits, '-' and '_', at most 128 characters); "
        "the server makes one when absent. Re-sending a request with the same id starts nothing "
        "new.")
    playbook: str = Field(description="The playbook's YAML text.")
    playbook_file: Text = Field("<request>", description="Name used in validation messages.")
    payload: JsonObject = Field(default_factory=dict,
                                description="Deep-merged over the playbook's workload.")
    parent_execution_id: ExecutionId | None = Field(
        None, description="Set when a playbook starts a child.")
    parent_iter: JsonObject | None = Field(
        None, description="The loop iteration (`iter`) of the parent task that starts this "
        "child, if any; the child's templates read it as `iter.parent` (spec 002 §6.4).")
    parent_step_run_id: StepRunId | None = Field(
        None, description="The parent's step run whose command starts this child. With it the "
        "server records `child.started` in the parent's event log, and the parent's router "
        "cancels the child when it cuts that run short.")
    parent_iteration: Int64 | None = Field(
        None, description="The loop iteration number of the parent's command, if any.")
    detached: bool = Field(
        False, description="A fire-and-forget child (`async: true`): the parent does not wait "
        "for it, and cancelling the parent's step leaves it running.")
    reply_to: ReplySubject | None = Field(
        None, description="Core NATS subject that receives {accepted, execution_id, errors} "
        "once the request is handled.")
    labels: Labels = Field(default_factory=dict)
    replay: ReplaySeed | None = Field(
        None, description="Start as a replay of another execution (`noetl-stream replay`): "
        "the seeded steps keep the original's results and the roots run first.")
    concurrency: JsonObject | None = Field(
        None, description="A concurrency limit `{limit, key, on_limit}` for this execution when "
        "its playbook declares none in `executor.spec.concurrency` (a trigger's "
        "`spec.concurrency`); the playbook's own limit always wins.")


class RequestReply(BaseModel):
    """What the server answers on `reply_to`."""

    model_config = ConfigDict(frozen=True)

    accepted: bool
    execution_id: str | None = None
    errors: list[str] = Field(default_factory=list)
    conflict: bool = Field(False, description="The execution id exists, started by another "
                           "request (a different playbook or payload); nothing was started.")


class CancelRequest(BaseModel):
    """Body of a message on `noetl.requests.cancel`: stop one execution and its children."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    execution_id: ExecutionId = Field(description="The execution to cancel.")
    reason: Text | None = Field(None, description="Why; recorded on the cancellation events.")
    requested_by: Text | None = Field(None, description="Who asked (a user, `cli`, a parent).")
    reply_to: ReplySubject | None = Field(
        None, description="Core NATS subject that receives {accepted, execution_id, errors} "
        "once the request is handled.")


# -- commands -------------------------------------------------------------------------------
def _received_object(value: object) -> jsonutil.JsonObject:
    if not isinstance(value, dict):
        raise PydanticCustomError("dict_type", "Input should be a valid dictionary")  # as pydantic's
    return value


# A JSON object as received (parse_object bounded its depth) or as the router holds it: checked to
# be an object, not walked value by value (a command's context may hold large results), and kept
# as it is, not copied.
ReceivedObject = Annotated[jsonutil.JsonObject, PlainValidator(_received_object),
                           WithJsonSchema({"additionalProperties": True, "type": "object"})]


class CommandContext(BaseModel):
    """The part of the execution a command's templates may read (router/engine.py `command`)."""

    # Fields a newer router adds are kept, not refused: a worker of the previous release must
    # not dead-letter the commands of a rolling upgrade.
    model_config = ConfigDict(extra="allow")

    workload: ReceivedObject = Field(default_factory=dict)
    ctx: ReceivedObject = Field(default_factory=dict)
    args: ReceivedObject = Field(default_factory=dict)
    iter: ReceivedObject = Field(default_factory=dict)
    vars: ReceivedObject = Field(default_factory=dict)
    steps: ReceivedObject = Field(default_factory=dict, description="Results of the finished "
                                  "steps the command's templates name, by step name.")
    steps_http: ReceivedObject = Field(default_factory=dict)
    steps_loop: list[str] = Field(default_factory=list)

    def encoded(self) -> object:
        """Its fields as published (jsonutil.Encodable), values as they are, not copied."""
        return _fields(self)


class CommandCursor(BaseModel):
    """A cursor loop's claim (router/loops.py): the worker runs it before the step's tasks to
    claim the iteration's item (worker/cursor.py) and binds the row to `iterator`.
    """

    model_config = ConfigDict(extra="allow")  # as CommandContext

    kind: str = Field("postgres", description="The tool kind that claims.")
    claim: str = Field(description="Template of the SQL that claims one item.")
    auth: jsonutil.JsonValue = None
    connection: jsonutil.JsonValue = None
    iterator: str = Field(description="The name `iter` holds the claimed row under.")

    def encoded(self) -> object:
        """Its fields as published (jsonutil.Encodable)."""
        return _fields(self)


class Command(BaseModel):
    """Body of a message on `noetl.commands.<pool>.<kind>`: run one step's tasks (or one loop
    iteration's) and report the outcome.
    """

    model_config = ConfigDict(extra="allow")  # as CommandContext

    execution_id: ExecutionId
    playbook: Text | None = Field(None, description="The playbook's path or name (metrics).")
    step: StepName
    step_run_id: StepRunId
    parent_execution_id: ExecutionId | None = None
    iteration: Int64 | None = Field(None, description="The loop iteration, or null.")
    attempt: Int64 = 1
    tasks: TaskList = Field(description="The step's tasks, normalized.")
    step_args: dict[str, Any] | None = None
    context: CommandContext = Field(default_factory=CommandContext)
    keychain: list[dict[str, Any]] = Field(default_factory=list)
    max_payload_bytes: Int64 | None = None
    source_file: Text | None = Field(None, description="The playbook's file, as its parse "
                                     "errors name it: template errors are located in it.")
    step_line: Int64 | None = Field(None, description="The step's line in that file.")
    # The fields below are published only when set, as the router always sent them.
    cursor: CommandCursor | None = Field(None, description="A cursor loop's claim.")
    task_results: bool = Field(False, description="Keep each task's result in the step's "
                               "result as `results` (a template reads `<step>.results`).")
    restart: Int64 = Field(0, description="The execution's restarts when it was issued: a "
                           "cancellation before the latest restart does not withdraw it.")

    def encoded(self) -> object:
        """The body as published (jsonutil.Encodable): its fields in order, values as they are
        (the tasks as the router dumped them), `cursor`, `task_results` and `restart` only when
        set. A command is encoded once, where it is published or stored.
        """
        body = _fields(self)
        if self.cursor is None:
            del body["cursor"]
        if not self.task_results:
            del body["task_results"]
        if not self.restart:
            del body["restart"]
        return body


def _fields(model: BaseModel) -> dict[str, object]:
    """A model's fields (then those it kept beyond its own), in order, as they are: a shallow
    copy of pydantic's own store, many times faster than `dict(model)`.
    """
    return {**model.__dict__, **(model.model_extra or {})}


def command_body(*, execution_id: str, playbook: str | None, step: str, step_run_id: str,
                 parent_execution_id: str | None, iteration: int | None, tasks: TaskList,
                 step_args: dict[str, Any] | None, context: CommandContext,
                 keychain: list[dict[str, Any]], max_payload_bytes: int | None,
                 attempt: int = 1, cursor: CommandCursor | None = None,
                 source_file: str | None = None, step_line: int | None = None,
                 task_results: bool = False, restart: int = 0) -> Command:
    """The one constructor of a command (the router's; a worker validates what it receives).
    Validated here too: a playbook's path and file are the user's text, and a command the
    router cannot build fails the execution where a worker's refusal would only dead-letter it.
    """
    return Command(execution_id=execution_id, playbook=playbook, step=step,
                   step_run_id=step_run_id, parent_execution_id=parent_execution_id,
                   iteration=iteration, attempt=attempt, tasks=tasks, step_args=step_args,
                   context=context, keychain=keychain, max_payload_bytes=max_payload_bytes,
                   source_file=source_file, step_line=step_line, cursor=cursor,
                   task_results=task_results, restart=restart)


def command_context(*, workload: jsonutil.JsonObject, ctx: jsonutil.JsonObject,
                    args: jsonutil.JsonObject, iter: jsonutil.JsonObject,
                    vars: jsonutil.JsonObject, steps: jsonutil.JsonObject,
                    steps_http: jsonutil.JsonObject, steps_loop: list[str]) -> CommandContext:
    """A command's context as the router builds it."""
    return CommandContext(workload=workload, ctx=ctx, args=args, iter=iter, vars=vars,
                          steps=steps, steps_http=steps_http, steps_loop=steps_loop)


class StepIdentity(BaseModel):
    """The step run a command or outcome event belongs to (what a dead letter is filed under)."""

    model_config = ConfigDict(extra="allow")

    execution_id: ExecutionId
    step: StepName
    step_run_id: StepRunId
    iteration: Int64 | None = None
    parent_execution_id: ExecutionId | None = None


# -- events ---------------------------------------------------------------------------------
class EventEnvelope(BaseModel):
    """What the router checks of any event it takes (the catalog in events.py has each type's
    fields). Other fields are the type's own, bounded in depth and integer size.
    """

    model_config = ConfigDict(extra="allow")

    execution_id: ExecutionId
    event_type: EventType
    step: StepName | None = None
    step_run_id: StepRunId | None = None
    iteration: Int64 | None = None
    parent_execution_id: ExecutionId | None = None


class SignalEvent(BaseModel):
    """What the router makes of a signal: the body a client published on
    `<prefix>.events.<execution_id>.signal.<name>` is its `data`, never an envelope.
    """

    model_config = ConfigDict(extra="forbid")

    event_type: EventType = Field(description="`signal.<name>`, from the subject.")
    execution_id: ExecutionId = Field(description="From the subject.")
    data: Json = Field(None, description="The published body: any JSON value, or the text when "
                       "it is not JSON, or null when empty.")
    seq: Int64 | None = Field(None, description="Its stream sequence.")


def event_body(event_type: str, execution_id: str, timestamp: float, *,
               parent_execution_id: str | None = None, **fields: Any) -> dict[str, Any]:
    """The one constructor of an event body: the envelope, then the type's own fields
    (events.py); `event_id` and `time` are stamped where it is published (bus/publish.py).
    """
    return {"event_type": event_type, "execution_id": execution_id, "timestamp": timestamp,
            "parent_execution_id": parent_execution_id, **fields}


OutcomeType = Literal["step.done", "step.failed", "loop.iteration.done", "loop.iteration.failed"]


def outcome_type(ok: bool, iteration: int | None) -> OutcomeType:
    """The type of a command's outcome: `step.done` / `step.failed` for a step's own command,
    `loop.iteration.done` / `loop.iteration.failed` for one iteration of a loop.
    """
    if iteration is None:
        return "step.done" if ok else "step.failed"
    return "loop.iteration.done" if ok else "loop.iteration.failed"


def outcome_event(*, ok: bool, execution_id: str, step: str, step_run_id: str,
                  iteration: int | None, timestamp: float, parent_execution_id: str | None = None,
                  result: object = None, error: ErrorInfo | Mapping[str, JsonValue] | None = None,
                  **fields: object) -> dict[str, Any]:
    """The one constructor of an outcome event body (events.py `OutcomeEvent`): what a worker
    publishes when a command ends, and what the dead-letter service, the pool and stall checks,
    the router's watchdog and the test harness publish or apply in its place. Its type is
    `outcome_type(ok, iteration)`. A failure's `error` is an `ErrorInfo`; the worker's pipeline
    still reports its own as a mapping (worker/pipeline.py).
    """
    return event_body(
        outcome_type(ok, iteration), execution_id, timestamp,
        parent_execution_id=parent_execution_id, step=step, step_run_id=step_run_id,
        iteration=iteration, status="ok" if ok else "error", result=result,
        error=error.model_dump(mode="json", exclude_none=True) if isinstance(error, ErrorInfo)
        else None if error is None else dict(error), **fields)


# -- validation at the edges -----------------------------------------------------------------
class Malformed(ValueError):
    """A message that no delivery can make valid; `failure` is its class in
    bus/dispositions.py (`malformed_json`, `schema`, `subject_mismatch`).
    """

    def __init__(self, failure: str, reason: str, raw: object = None) -> None:
        super().__init__(reason)
        self.failure = failure
        self.reason = reason
        self.raw = raw  # the JSON it held, when it was JSON (to find who waits for an answer)


def parse_object(data: bytes) -> dict[str, Any]:
    """A JSON object of bounded depth, or Malformed."""
    try:
        value = jsonutil.loads(data)
    except ValueError as exc:
        raise Malformed("malformed_json", f"not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise Malformed("malformed_json", f"the body is a JSON {type(value).__name__}, not an "
                        "object", value)
    # orjson reads every integer it keeps as one within 64 bits (larger ones become floats), so
    # only the depth is left to check, and it cannot pass the count of opening brackets.
    if data.count(b"[") + data.count(b"{") > MESSAGE_DEPTH:
        problem = bounded_json_problem(value)
        if problem is not None:
            raise Malformed("schema", f"the body cannot be taken: {problem}", value)
    return value


M = TypeVar("M", bound=BaseModel)


def validated(model: type[M], data: bytes) -> M:
    """`data` as `model`, or Malformed naming every field that is wrong."""
    return checked(model, parse_object(data))


def checked(model: type[M], raw: dict[str, Any]) -> M:
    """A parsed body as `model`, or Malformed naming every field that is wrong."""
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise Malformed("schema", describe(exc), raw) from None


def describe(exc: ValidationError) -> str:
    """A validation error in one line: `field: what is wrong; ...` (inputs never echoed)."""
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}"
                     for e in exc.errors())


def reply_address(raw: object) -> tuple[str | None, str | None]:
    """The `execution_id` and `reply_to` of a request that failed validation, each only when
    it is valid itself (an answer must never build a subject NATS refuses).
    """
    if not isinstance(raw, dict):
        return None, None
    execution_id, reply_to = raw.get("execution_id"), raw.get("reply_to")
    usable_id = execution_id if isinstance(execution_id, str) \
        and execution_id_problem(execution_id) is None else None
    try:
        usable_reply = _reply_subject(reply_to) if isinstance(reply_to, str) else None
    except ValueError:
        usable_reply = None
    return usable_id, usable_reply


SIGNAL_PREFIX = "signal."
SCHEDULE_PREFIX = "timer.schedule."
TIMER_FIRED = "timer.fired"
TIMER_SCHEDULED = "timer.scheduled"


# What a worker reports when a command ends; the subject's last token names its pool.
OUTCOME_EVENTS: tuple[OutcomeType, ...] = get_args(OutcomeType)


def split_outcome_pool(tail: str) -> tuple[str, str | None]:
    """The event type and pool of a subject's tail after the execution id: `step.done.secure`
    -> (`step.done`, `secure`); any other event type with no pool.
    """
    etype, _, pool = tail.rpartition(".")
    return (etype, pool) if etype in OUTCOME_EVENTS else (tail, None)
