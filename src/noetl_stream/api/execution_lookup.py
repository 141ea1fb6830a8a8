"""Finding an execution: its router state in KV `noetl_executions`, or the `execution.rejected`
event of a request the server refused (a rejected execution has no state).
"""

from __future__ import annotations

from datetime import UTC, datetime

from nats.js.errors import KeyNotFoundError, NotFoundError

from noetl_stream import ids, jsonutil
from noetl_stream.api.context import ApiContext
from noetl_stream.api.errors import ApiError, not_found
from noetl_stream.api.event_log import EVENTS_STREAM
from noetl_stream.api.execution_filters import error_message
from noetl_stream.api.models import ExecutionDetail, ExecutionItem, SlotWait
from noetl_stream.router import admission
from noetl_stream.router.state import ExecutionState
from noetl_stream.state.results import ResultStore
from noetl_stream.state.step_results import StepResults

TERMINAL = frozenset({"completed", "failed", "cancelled"})
def check_execution_id(execution_id: str) -> str:
    # One rule for every message (messages.py): an id that breaks it names no execution, and
    # is never put into a subject or KV key (nats-server closes a connection over 4 KiB ones).
    if not ids.is_subject_token(execution_id):
        raise not_found(f'execution "{execution_id[:ids.MAX_TOKEN_LENGTH]}"')
    return execution_id


async def load_state(ctx: ApiContext, execution_id: str) -> ExecutionState | None:
    try:
        entry = await ctx.executions.get(check_execution_id(execution_id))
    except KeyNotFoundError:
        return None
    return ExecutionState.from_dict(jsonutil.loads(entry.value)) if entry.value else None


async def rejection(ctx: ApiContext, execution_id: str) -> list[str] | None:
    """The reasons the server refused `execution_id`'s request, or None if it did not."""
    subject = ctx.bus.topology.event_subject(check_execution_id(execution_id), "execution.rejected")
    try:
        msg = await ctx.bus.js.get_last_msg(EVENTS_STREAM, subject)
    except NotFoundError:
        return None
    body = jsonutil.loads(msg.data or b"{}")
    errors = body.get("errors") if isinstance(body, dict) else None
    return [str(e) for e in errors] if isinstance(errors, list) else []


def _started(state: ExecutionState) -> datetime | None:
    return datetime.fromtimestamp(state.started_at, UTC) if state.started_at else None


def item_of(state: ExecutionState) -> ExecutionItem:
    return ExecutionItem(execution_id=state.execution_id, status=state.status,
                         playbook_path=state.playbook_path, playbook_name=state.playbook_name,
                         started_at=_started(state), parent_execution_id=state.parent_execution_id,
                         ended_at=datetime.fromtimestamp(state.ended_at, UTC)
                         if state.ended_at is not None else None,
                         labels=state.labels, error_message=error_message(state),
                         waiting=slot_wait(state))


def slot_wait(state: ExecutionState) -> SlotWait | None:
    """Where the execution waits for a slot, while it does (router/admission.py)."""
    held = state.admission
    if state.status != "running" or not admission.waiting(state) or held is None:
        return None
    return SlotWait(group=str(held.get("group", "")), key=str(held.get("key", "")),
                    limit=int(held.get("limit", 0)))


async def detail(ctx: ApiContext, execution_id: str) -> ExecutionDetail:
    """What GET /api/executions/{id} answers; 404 for an id nobody has heard of."""
    state = await load_state(ctx, execution_id)
    if state is not None:
        # Results live beside the state (state/step_results.py); the detail shows them inline.
        await StepResults(ctx.bus.js, ResultStore(ctx.bus.js)).load(state)
        summary = state.summary()
        # The state's result is the last completed step's: the execution's only once it completed.
        result = summary["result"] if state.status == "completed" else None
        return ExecutionDetail(**item_of(state).model_dump(), result=result,
                               error=summary["error"], steps=summary["steps"],
                               ctx=summary["ctx"], vars=summary["vars"],
                               replay_of=state.replay_of, replays=state.replays)
    errors = await rejection(ctx, execution_id)
    if errors is None:
        raise not_found(f'execution "{execution_id}"')
    return ExecutionDetail(execution_id=execution_id, status="rejected", playbook_path=None,
                           playbook_name=None, started_at=None, parent_execution_id=None,
                           errors=errors)


async def require_running(ctx: ApiContext, execution_id: str) -> ExecutionState:
    """The state of a running execution: 404 when unknown, 409 when it has ended."""
    state = await load_state(ctx, execution_id)
    status = state.status if state is not None else (await detail(ctx, execution_id)).status
    if state is None or status in TERMINAL:
        raise ApiError(409, f'execution "{execution_id}" has already ended ({status})',
                       details={"status": status})
    return state
