"""What the server says back to an execution or cancel request, and the events a request
leaves in an execution's log: the reply on `reply_to`, `execution.rejected`, a conflict,
`execution.cancel.requested`, and a child's `child.started` in its parent's log.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from nats.aio.msg import Msg
from nats.js.errors import KeyNotFoundError, NotFoundError
from nats.js.kv import KeyValue

from noetl_stream import ids, jsonutil
from noetl_stream.bus.connection import Bus
from noetl_stream.bus.dispositions import Failure, classify, settle
from noetl_stream.bus.publish import publish_event
from noetl_stream.jsonutil import JsonValue
from noetl_stream.messages import (
    CancelRequest,
    ExecutionRequest,
    Malformed,
    RequestReply,
    event_body,
    reply_address,
    validated,
)
from noetl_stream.router.cancel import REQUESTED as CANCEL_REQUESTED
from noetl_stream.router.children import STARTED as CHILD_STARTED
from noetl_stream.router.state import ExecutionState

# The server's request loop takes a worker's requests through these (server.py).
from noetl_stream.server.child_requests import cancel_refusal
from noetl_stream.server.child_requests import checked_start as checked_start
from noetl_stream.server.child_requests import is_cancel as is_cancel

log = logging.getLogger("noetl_stream.server")


async def reply(bus: Bus, reply_to: str | None, execution_id: str | None, errors: list[str],
                *, accepted: bool | None = None, conflict: bool = False) -> None:
    """Answer a request's `reply_to`, if it gave one; accepted when there are no errors,
    unless told otherwise.
    """
    if reply_to:
        accepted = not errors if accepted is None else accepted
        answer = RequestReply(accepted=accepted, execution_id=execution_id, errors=errors,
                              conflict=conflict)
        await bus.nc.publish(reply_to, answer.model_dump_json().encode())


async def reject(bus: Bus, msg: Msg, execution_id: str | None, reply_to: str | None,
                 errors: list[str], failure: Failure, now: float) -> None:
    """Refuse an execution request: `execution.rejected` in the log of the id it named (if it
    named a valid one), the answer, and the message settled as `failure` says.
    """
    log.warning("rejected execution request (%s): %s", failure, "; ".join(errors)[:2000])
    # Never in the log of an execution that exists: a bad request naming a running execution's
    # id would end whoever follows it (`run`, a parent's task) with a rejection it never had.
    if execution_id is not None and not await _exists(bus, execution_id):
        body = event_body("execution.rejected", execution_id, now, status="rejected",
                          errors=errors)
        await publish_event(bus, execution_id, "execution.rejected",
                            ids.event_msg_id(execution_id, "execution.rejected"), body)
    await reply(bus, reply_to, execution_id, errors, accepted=False)
    # Terminated: a malformed request will never become valid by redelivery.
    await settle(msg, failure)


async def _exists(bus: Bus, execution_id: str) -> bool:
    try:
        await bus.js.get_msg("KV_noetl_executions", subject=f"$KV.noetl_executions.{execution_id}")
    except NotFoundError:
        return False
    return True


async def refuse_conflict(bus: Bus, msg: Msg, execution_id: str, reply_to: str | None) -> None:
    """The id belongs to an execution started by another request: answer so, leave that
    execution alone (no event in its log), and drop the request.
    """
    log.warning("execution request for %s conflicts with the one that started it", execution_id)
    await reply(bus, reply_to, execution_id, [
        f"execution {execution_id} exists, started by another request (a different playbook or "
        "payload); nothing was started"], accepted=False, conflict=True)
    await settle(msg, Failure.REFUSED)


def same_request(state: ExecutionState, playbook_key: str, workload: Mapping[str, JsonValue],
                 request: ExecutionRequest) -> bool:
    """Whether `request` is the one that started `state` again: same playbook text, same
    workload after the payload merge, same parent. Compared as JSON, as the state stores them.
    """
    return (state.playbook_key == playbook_key
            and state.workload == jsonutil.loads(jsonutil.dumps(workload))
            and state.parent_execution_id == request.parent_execution_id)


async def publish_child_started(bus: Bus, request: ExecutionRequest, state: ExecutionState,
                                now: float) -> None:
    """Record a child in its parent's event log; the parent's router cancels it if the step
    that waits on it is cut short (router/children.py). Repeats are deduplicated.
    """
    parent = request.parent_execution_id
    if parent is None or request.parent_step_run_id is None:
        return  # not started by a command the parent's router could tie it to
    if state.parent_execution_id != parent:
        return  # the request reused the id of an execution that is no child of this parent
    execution_id = state.execution_id
    body = event_body(CHILD_STARTED, parent, now, child_execution_id=execution_id,
                      step_run_id=request.parent_step_run_id,
                      iteration=request.parent_iteration, detached=request.detached)
    await publish_event(bus, parent, CHILD_STARTED,
                        ids.event_msg_id(parent, CHILD_STARTED, execution_id), body)


async def handle_cancel(bus: Bus, executions: KeyValue, msg: Msg, now: float) -> None:
    """Turn a cancel request into the execution's `execution.cancel.requested` event; the
    router applies it in order with the execution's other events.
    """
    try:
        request = validated(CancelRequest, msg.data)
    except Malformed as exc:
        _, reply_to = reply_address(exc.raw)
        log.warning("rejected cancel request: %s", exc)
        await reply(bus, reply_to, None, [f"bad cancel request: {exc}"])
        await settle(msg, classify(exc))  # it will never become valid by redelivery
        return
    execution_id = request.execution_id
    try:
        entry = await executions.get(execution_id)
        state = ExecutionState.from_dict(jsonutil.loads(entry.value or b"{}"))
    except (KeyNotFoundError, KeyError, ValueError):
        log.warning("cancel request for unknown execution %s", execution_id)
        await reply(bus, request.reply_to, execution_id, [f"no execution {execution_id} is known"])
        await settle(msg, Failure.UNKNOWN_EXECUTION)
        return
    refusal = await cancel_refusal(bus, msg, state)
    if refusal is not None:
        log.warning("refused cancel request on %s: %s", msg.subject[:200], refusal)
        await reply(bus, request.reply_to, execution_id, [refusal])
        await settle(msg, Failure.REFUSED)
        return
    if state.status != "running":
        await reply(bus, request.reply_to, execution_id,
                    [f"execution {execution_id} already {state.status}; nothing to cancel"])
        await msg.ack()
        return
    body = event_body(CANCEL_REQUESTED, execution_id, now,
                      parent_execution_id=state.parent_execution_id, reason=request.reason,
                      requested_by=request.requested_by)
    await publish_event(bus, execution_id, CANCEL_REQUESTED,
                        ids.event_msg_id(execution_id, CANCEL_REQUESTED,
                                         *((state.restarts,) if state.restarts else ())), body)
    await reply(bus, request.reply_to, execution_id, [])
    await msg.ack_sync()
