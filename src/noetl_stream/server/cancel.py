"""Asking for an execution to be cancelled: one request message, deduplicated per execution.

The server turns the request into the execution's `execution.cancel.requested` event, which the
router applies like any other; asking twice is the same as asking once (once per restart of
the execution, when the caller knows its restart count).
"""

from __future__ import annotations

from noetl_stream import ids
from noetl_stream.bus.connection import Bus
from noetl_stream.messages import CancelRequest


async def request_cancel(bus: Bus, execution_id: str, *, reason: str | None = None,
                         requested_by: str | None = None, reply_to: str | None = None,
                         restarts: int = 0) -> None:
    """Publish a cancel request for `execution_id` (stored by JetStream before this returns)."""
    request = CancelRequest(execution_id=execution_id, reason=reason, requested_by=requested_by,
                            reply_to=reply_to)
    await bus.js.publish(bus.topology.cancel_request_subject(), request.model_dump_json().encode(),
                         headers={"Nats-Msg-Id": ids.cancel_msg_id(execution_id, restarts)})
