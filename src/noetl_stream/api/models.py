"""Bodies, queries and answers of the HTTP API (pydantic; `openapi.py` exports them)."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from noetl_stream.jsonutil import JsonObject, JsonValue
from noetl_stream.messages import Labels
from noetl_stream.state.credentials import CredentialInfo
from noetl_stream.state.sessions import SessionInfo
from noetl_stream.state.users import Role

MAX_TEXT = 1024 * 1024


class _In(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class _Out(BaseModel):
    model_config = ConfigDict(frozen=True)


class SkippedRecord(_Out):
    key: str = Field(description="The KV key of the record left out")
    reason: str = Field(description="Why it could not be read")


class ErrorDetail(_Out):
    code: str = Field(description="Stable machine-readable code, e.g. not_found, invalid_playbook")
    message: str
    details: JsonValue = Field(None, description="Per-field problems or playbook issues, when any")


class ErrorReply(_Out):
    error: ErrorDetail


# -- catalog ------------------------------------------------------------------------------------
class CatalogRegister(_In):
    content: str = Field(max_length=MAX_TEXT, description="The playbook's YAML text")
    strict: bool = Field(False, description="Treat unknown keys as errors")


class CatalogRegistered(_Out):
    path: str
    version: str | None
    playbook_id: str = Field(description="Content key of the text (pb_...); runs it exactly")
    warnings: list[str] = Field(default_factory=list)


class CatalogPath(_Out):
    path: str
    latest: str | None = Field(description="playbook_id that `latest` points at")
    versions: dict[str, str] = Field(description="version -> playbook_id")


class CatalogList(_Out):
    items: list[CatalogPath]
    skipped: list[SkippedRecord] = Field(default_factory=list, description="Records that do "
                                         "not decode, left out (and logged)")


class CatalogQuery(_In):
    version: str | None = Field(None, max_length=200, description="A version; default latest")


class CatalogPlaybook(_Out):
    path: str
    version: str | None
    playbook_id: str
    name: str
    content: str


class CatalogDeleted(_Out):
    path: str
    removed: list[str] = Field(description="Versions removed ('latest' for the latest pointer)")


# -- executions ---------------------------------------------------------------------------------
class ExecuteBody(_In):
    path: str | None = Field(None, max_length=1000, description="Catalog path to run")
    version: str | None = Field(None, max_length=200, description="With `path`: default latest")
    playbook_id: str | None = Field(None, max_length=200, description="A catalog content key")
    playbook: str | None = Field(None, max_length=MAX_TEXT, description="Inline playbook YAML")
    payload: JsonObject = Field(default_factory=dict,
                                    description="Deep-merged over the playbook's workload")
    labels: Labels = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one_source(self) -> ExecuteBody:
        given = [n for n in ("path", "playbook_id", "playbook") if getattr(self, n) is not None]
        if len(given) != 1:
            raise ValueError("give exactly one of path, playbook_id, playbook")
        if self.version is not None and self.path is None:
            raise ValueError("version goes with path")
        return self


ExecutionStatus = Literal["submitted", "accepted", "running", "completed", "failed", "cancelled",
                          "rejected"]


class ExecutionAccepted(_Out):
    execution_id: str
    status: ExecutionStatus = Field(description="accepted: the server started it; submitted: "
                                    "stored, not yet confirmed; otherwise its current status "
                                    "(a repeated Idempotency-Key)")


class ExecutionListQuery(_In):
    status: str | None = Field(None, max_length=32)
    path: str | None = Field(None, max_length=1000, description="Playbook metadata.path")
    since: datetime | None = Field(None, description="Started at or after (ISO 8601 or unix time)")
    until: datetime | None = Field(None, description="Started before (ISO 8601 or unix time)")
    execution_id: str | None = Field(None, max_length=200, description="Ids containing this text")
    playbook: str | None = Field(None, max_length=1000, description="Playbook path or name "
                                 "containing this text, in any case")
    label: str | None = Field(None, max_length=400, description="`key=value`: executions with "
                              "this label (`key` alone: with this label, any value)")
    limit: int = Field(50, ge=1, le=500)
    cursor: str | None = Field(None, max_length=200, description="next_cursor of the last page")


class SignalQuery(_In):
    force: bool = Field(False, description="Send even when no waiting step's guards name the "
                        "signal (it is stored and read by nothing)")


class SlotWait(_Out):
    """Where a running execution waits for a concurrency slot before its first step."""

    group: str = Field(description="The playbook, with the rendered key in brackets if any")
    key: str = Field(description="The rendered `concurrency.key` (empty without one)")
    limit: int = Field(description="At most this many executions of the group run at once")


class ExecutionItem(_Out):
    execution_id: str
    status: str
    playbook_path: str | None
    playbook_name: str | None
    started_at: datetime | None
    parent_execution_id: str | None
    ended_at: datetime | None = Field(None, description="When it completed, failed or was "
                                      "cancelled; none while it runs")
    labels: dict[str, str] = Field(default_factory=dict, description="The request's labels")
    error_message: str | None = Field(None, description="Why it failed or was cancelled: its "
                                      "error's message, cut at 500 characters")
    waiting: SlotWait | None = Field(None, description="Running, but waiting for a slot under "
                                     "its concurrency limit: no step has started; none otherwise")


class ExecutionList(_Out):
    items: list[ExecutionItem]
    next_cursor: str | None
    skipped: list[SkippedRecord] = Field(default_factory=list, description="States that do not "
                                         "decode, left out of the list (and logged)")
    counts: dict[str, int] = Field(default_factory=dict, description="Executions matching every "
                                   "filter but `status`, by status")


class ExecutionDetail(ExecutionItem):
    result: JsonValue = None
    error: JsonObject | None = None
    steps: JsonObject = Field(default_factory=dict)
    ctx: JsonObject = Field(default_factory=dict)
    vars: JsonObject = Field(default_factory=dict)
    errors: list[str] = Field(default_factory=list, description="Why a rejected request was refused")
    replay_of: str | None = Field(None, description="The execution this one replays")
    replays: list[str] = Field(default_factory=list, description="Executions replayed from this one")


class CancelBody(_In):
    reason: str | None = Field(None, max_length=1000)


class CancelAccepted(_Out):
    execution_id: str
    status: Literal["cancel_requested"] = "cancel_requested"


class RestartBody(_In):
    from_step: str | None = Field(None, max_length=256, description="Run this step and every step "
                                  "downstream of it again (any execution); without it, the steps "
                                  "that failed or were cancelled (a failed or cancelled execution)")
    workload: JsonObject = Field(default_factory=dict, description="Merged over the workload "
                                     "for what runs again")
    latest: bool = Field(False, description="Run the newest registered version of the playbook "
                         "from now on; refused (409) when it lacks a step the execution has run")


class ReplayBody(_In):
    from_step: str | None = Field(None, max_length=256, description="Run this step and every step "
                                  "downstream of it; the others keep the original's results. "
                                  "Without it: where the original failed or was cancelled")
    workload: JsonObject = Field(default_factory=dict, description="Merged over the "
                                     "original's workload")


class ReplayAccepted(_Out):
    execution_id: str = Field(description="The new execution")
    replay_of: str
    roots: list[str] = Field(description="The steps that run first")
    kept: list[str] = Field(description="The steps not run, with the original's results")
    status: Literal["replay_requested"] = "replay_requested"


class RestartAccepted(_Out):
    execution_id: str
    restart: int = Field(description="The restart's number; `execution.restarted` carries it")
    status: Literal["restart_requested"] = "restart_requested"


class SignalSent(_Out):
    execution_id: str
    signal: str
    seq: int = Field(description="Events stream sequence of the stored signal")


# -- events -------------------------------------------------------------------------------------
class EventsQuery(_In):
    after_seq: int = Field(0, ge=0, description="Events stream sequence to start after")
    limit: int = Field(100, ge=1, le=1000)


class StreamQuery(_In):
    after_seq: int | None = Field(None, ge=0, description="Start after this sequence "
                                  "(Last-Event-ID wins)")


class StoredEvent(_Out):
    seq: int = Field(description="Events stream sequence")
    event_type: str
    event: JsonObject


class EventPage(_Out):
    items: list[StoredEvent]
    next_after_seq: int = Field(description="after_seq for the next page")


# -- credentials --------------------------------------------------------------------------------
class CredentialCreate(_In):
    name: str = Field(max_length=200)
    kind: str = Field(max_length=64, description="postgres, bearer, basic, api_key or generic")
    data: JsonObject = Field(description="The material; validated per kind")
    description: str | None = Field(None, max_length=2000)
    tags: list[str] = Field(default_factory=list, max_length=64)


class CredentialList(_Out):
    items: list[CredentialInfo]
    skipped: list[SkippedRecord] = Field(default_factory=list, description="Records that do "
                                         "not decode, left out of the list (and logged)")


class CredentialQuery(_In):
    include_data: bool = Field(False, description="Return the material in clear (admin, worker; "
                               "audited)")
    execution_id: str | None = Field(None, max_length=200, description="Recorded in the audit event")


class CredentialDetail(CredentialInfo):
    data: JsonObject = Field(description="Masked unless include_data")


# -- vars ---------------------------------------------------------------------------------------
class VarsDoc(_Out):
    execution_id: str
    vars: JsonObject
    skipped: list[SkippedRecord] = Field(default_factory=list, description="Records that do "
                                         "not decode, left out (and logged)")


class VarValue(_Out):
    execution_id: str
    name: str
    value: JsonValue


class VarPut(_In):
    value: JsonValue = Field(description="Any JSON value")


# -- sessions -----------------------------------------------------------------------------------
class LoginBody(_In):
    api_key: str | None = Field(None, max_length=512)
    user: str | None = Field(None, max_length=128)
    password: str | None = Field(None, max_length=1024)

    @model_validator(mode="after")
    def _one_way(self) -> LoginBody:
        if (self.api_key is None) == (self.user is None or self.password is None):
            raise ValueError('give "api_key", or "user" and "password"')
        return self


class LoginReply(_Out):
    token: str = Field(description="Send as `Authorization: Bearer <token>`")
    session_id: str
    expires_at: datetime = Field(description="Moves forward while the session is used")
    user: str
    roles: list[Role]


class SessionsQuery(_In):
    user: str | None = Field(None, max_length=128, description="Another user's sessions (admin)")


class SessionList(_Out):
    items: list[SessionInfo]


class Deleted(_Out):
    deleted: str


# -- ops ----------------------------------------------------------------------------------------
class ConsumerHealth(_Out):
    stream: str
    consumer: str
    num_pending: int = Field(description="Messages not yet delivered (lag)")
    num_ack_pending: int
    num_redelivered: int


class PoolHealth(_Out):
    pool: str
    pending_commands: int = Field(description="Commands no worker has taken yet")
    live_workers: int = Field(description="Workers of the pool with a heartbeat in KV noetl_runtime")


class Health(_Out):
    status: Literal["ok", "degraded"]
    nats: bool
    jetstream: bool
    consumers: list[ConsumerHealth]
    pools: list[PoolHealth] = Field(default_factory=list)
    skipped: list[SkippedRecord] = Field(default_factory=list, description="Heartbeats that do "
                                         "not decode, left out of the counts (and logged)")
    problems: list[str] = Field(default_factory=list, description="Why it is degraded: NATS or "
                                "JetStream unreachable, a pool with pending commands and no live "
                                "worker, the router consumer lagging past its threshold")
