"""An execution's events: a page at a time, or live as Server-Sent Events.

SSE frames carry `id: <events stream sequence>`, `event: <event_type>` and the event as JSON
`data:`. A client that reconnects with `Last-Event-ID` (browsers do) continues after that
sequence. The stream ends after the execution's terminal event (completed, failed, cancelled, or
rejected); resuming an execution that has ended and has nothing left to send ends at once.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from noetl_stream import jsonutil
from noetl_stream.api.context import ApiContext, api_context
from noetl_stream.api.endpoints import Endpoint, json_response, read_query
from noetl_stream.api.errors import ApiError
from noetl_stream.api.event_log import count_after, follow, read_page, stored_event
from noetl_stream.api.execution_lookup import TERMINAL, check_execution_id, detail
from noetl_stream.api.models import EventPage, EventsQuery, StoredEvent, StreamQuery
from noetl_stream.bus.delivery import pending_of
from noetl_stream.bus.watcher import EndOfLog
from noetl_stream.errors import InfrastructureError

KEEPALIVE_S = 15.0


async def list_events(request: web.Request) -> web.StreamResponse:
    ctx = api_context(request)
    execution_id = request.match_info["execution_id"]
    query = read_query(request, EventsQuery)
    await detail(ctx, execution_id)  # 404 for an unknown id rather than an empty page
    items, last = await read_page(ctx.bus, execution_id, after_seq=query.after_seq, limit=query.limit)
    return json_response(EventPage(items=items, next_after_seq=last))


def _frame(event: StoredEvent) -> bytes:
    return (f"id: {event.seq}\nevent: {event.event_type}\n".encode()
            + b"data: " + jsonutil.dumps(event.event) + b"\n\n")


async def _over(ctx: ApiContext, execution_id: str, after_seq: int) -> bool:
    """True when the execution has ended and the stream holds nothing of it after `after_seq`."""
    status = (await detail(ctx, execution_id)).status
    ended = status in TERMINAL or status == "rejected"
    return ended and await count_after(ctx.bus, execution_id, after_seq) == 0


async def stream_events(request: web.Request) -> web.StreamResponse:
    ctx = api_context(request)
    execution_id = check_execution_id(request.match_info["execution_id"])
    after = read_query(request, StreamQuery).after_seq or 0
    last_id = request.headers.get("Last-Event-ID")
    if last_id is not None:
        if not last_id.strip().isdigit():
            raise ApiError(422, "Last-Event-ID must be an events stream sequence (a number)")
        after = int(last_id)
    over = await _over(ctx, execution_id, after)  # also the 404 for an unknown id
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                           "Cache-Control": "no-cache",
                                           "X-Accel-Buffering": "no"})
    await response.prepare(request)
    if over:
        await response.write_eof()
        return response
    end = EndOfLog()
    try:
        async with follow(ctx.bus, execution_id, after_seq=after) as feed:
            while True:
                try:
                    msg = await asyncio.wait_for(feed.get(), KEEPALIVE_S)
                except TimeoutError:
                    # Quiet for a while: a comment keeps proxies from closing the connection,
                    # and an execution that ended before we joined ends the stream (nothing
                    # stored after `after` means nothing is on its way to us either).
                    if await _over(ctx, execution_id, after):
                        break
                    await response.write(b": keepalive\n\n")
                    continue
                event = stored_event(ctx.bus, msg)
                after = int(msg.metadata.sequence.stream)
                if event is None:
                    continue
                await response.write(_frame(event))
                if end.see(event.event, pending_of(msg)) is not None:
                    break
        await response.write_eof()
    except (ConnectionResetError, ConnectionError):
        pass  # the client went away; its consumer is gone with the `follow` block
    except InfrastructureError:
        pass  # our NATS connection closed (shutting down): the client resumes with Last-Event-ID
    return response


ENDPOINTS = [
    Endpoint("GET", "/api/executions/{execution_id}/events", list_events, "A page of an "
             "execution's events, each with its events stream sequence", "read", "events",
             query=EventsQuery, response=EventPage, errors=(404, 422)),
    Endpoint("GET", "/api/executions/{execution_id}/events/stream", stream_events, "The "
             "execution's events live as Server-Sent Events (id = stream sequence; resume with "
             "Last-Event-ID)", "read", "events", query=StreamQuery, errors=(404, 422),
             produces="text/event-stream",
             headers=(("Last-Event-ID", "Continue after this events stream sequence"),)),
]
