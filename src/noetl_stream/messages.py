"""Message bodies at the edges, as pydantic models (exported to `schemas/`)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from noetl_stream.ids import is_subject_token


class ExecutionRequest(BaseModel):
    """Body of a message on `noetl.requests.execute`: start one execution of a playbook."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    execution_id: str | None = Field(
        None, description="Id to use (a NATS subject token); the server makes one when absent. "
        "Re-sending a request with the same id starts nothing new.")
    playbook: str = Field(description="The playbook's YAML text.")
    playbook_file: str = Field("<request>", description="Name used in validation messages.")
    payload: dict[str, Any] = Field(default_factory=dict,
                                    description="Deep-merged over the playbook's workload.")
    parent_execution_id: str | None = Field(None, description="Set when a playbook starts a child.")
    parent_iter: dict[str, Any] | None = Field(
        None, description="The loop iteration (`iter`) of the parent task that starts this "
        "child, if any; the child's templates read it as `iter.parent` (spec 002 §6.4).")
    parent_step_run_id: str | None = Field(
        None, description="The parent's step run whose command starts this child. With it the "
        "server records `child.started` in the parent's event log, and the parent's router "
        "cancels the child when it cuts that run short.")
    parent_iteration: int | None = Field(
        None, description="The loop iteration number of the parent's command, if any.")
    detached: bool = Field(
        False, description="A fire-and-forget child (`async: true`): the parent does not wait "
        "for it, and cancelling the parent's step leaves it running.")
    reply_to: str | None = Field(None, description="Core NATS subject that receives "
                                 "{accepted, execution_id, errors} once the request is handled.")

    @field_validator("execution_id")
    @classmethod
    def _token(cls, value: str | None) -> str | None:
        if value is not None and not is_subject_token(value):
            raise ValueError("execution_id must not contain '.', '*', '>' or spaces")
        return value


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

    execution_id: str = Field(description="The execution to cancel.")
    reason: str | None = Field(None, description="Why; recorded on the cancellation events.")
    requested_by: str | None = Field(None, description="Who asked (a user, `cli`, a parent).")
    reply_to: str | None = Field(None, description="Core NATS subject that receives "
                                 "{accepted, execution_id, errors} once the request is handled.")

    @field_validator("execution_id")
    @classmethod
    def _token(cls, value: str) -> str:
        if not is_subject_token(value):
            raise ValueError("execution_id must not contain '.', '*', '>' or spaces")
        return value
