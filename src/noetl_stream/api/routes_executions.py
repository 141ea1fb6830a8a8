"""Starting, listing, reading, cancelling and signalling executions.

Starting publishes the same `ExecutionRequest` the CLI does (deterministic `Nats-Msg-Id`
`req:<execution_id>`), with a `reply_to` inbox so a refused playbook becomes a 422 here. With an
`Idempotency-Key` header the execution id is derived from the caller and the key, so repeating
the request returns the same execution instead of starting another.
"""

from __future__ import annotations

import re

from aiohttp import web
from nats.errors import TimeoutError as NatsTimeoutError

from noetl_stream import ids
from noetl_stream.api.auth import principal
from noetl_stream.api.context import ApiContext, api_context
from noetl_stream.api.endpoints import Endpoint, json_response, read_body, read_json, read_query
from noetl_stream.api.errors import ApiError, not_found
from noetl_stream.api.execution_filters import matches, status_counts
from noetl_stream.api.execution_lookup import (
    check_execution_id,
    detail,
    item_of,
    load_state,
    rejection,
    require_running,
)
from noetl_stream.api.models import (
    CancelAccepted,
    CancelBody,
    ExecuteBody,
    ExecutionAccepted,
    ExecutionDetail,
    ExecutionList,
    ExecutionListQuery,
    ReplayAccepted,
    ReplayBody,
    RestartAccepted,
    RestartBody,
    SignalQuery,
    SignalSent,
    SkippedRecord,
)
from noetl_stream.api.routes_catalog import parse, read_text
from noetl_stream.bus.signals import publish_signal, why_unheard
from noetl_stream.errors import ReplayRefused, RestartRefused
from noetl_stream.ids import derived_execution_id
from noetl_stream.messages import ExecutionRequest, RequestReply, signal_name_problem
from noetl_stream.router.state import ExecutionState
from noetl_stream.server.cancel import request_cancel
from noetl_stream.server.execution_ids import new_execution_id
from noetl_stream.server.replays import request_replay
from noetl_stream.server.restart import request_restart
from noetl_stream.state.catalog import path_key
from noetl_stream.state.kv_keys import bucket_keys
from noetl_stream.state.records import Skips, read_each

IDEMPOTENCY_HEADER = "Idempotency-Key"
_PLAYBOOK_ID = re.compile(r"pb_[0-9a-f]{32}")
_CURSOR = re.compile(r"(\d+(?:\.\d+)?):([-_=A-Za-z0-9]+)")


def execution_id_for(user: str, idempotency_key: str | None) -> str:
    """A fresh id, or the one a caller's key always maps to (numeric like every id we issue,
    though not time-ordered).
    """
    if not idempotency_key:
        return new_execution_id()
    return derived_execution_id("idempotency-key", user, idempotency_key)


async def _playbook_text(ctx: ApiContext, body: ExecuteBody) -> tuple[str, str]:
    """(text, name for messages) of the playbook the body names."""
    if body.playbook is not None:
        parse(ctx, body.playbook)  # 422 with every issue before anything is published
        return body.playbook, "<request>"
    if body.playbook_id is not None:
        text = await read_text(ctx, body.playbook_id) if _PLAYBOOK_ID.fullmatch(body.playbook_id) \
            else None
        if text is None:
            raise not_found(f'playbook_id "{body.playbook_id}"')
        return text, body.playbook_id
    assert body.path is not None  # ExecuteBody allows exactly one source
    pointer = await read_text(ctx, path_key(body.path, body.version))
    text = await read_text(ctx, pointer) if pointer else None
    if text is None:
        shown = f'"{body.path}"' + (f' version "{body.version}"' if body.version else "")
        raise not_found(f"playbook {shown} in the catalog")
    return text, body.path


async def _existing(ctx: ApiContext, execution_id: str) -> web.Response | None:
    """The answer for an id that was already used: its status, or its rejection again."""
    state = await load_state(ctx, execution_id)
    if state is not None:
        accepted = ExecutionAccepted.model_validate({"execution_id": execution_id,
                                                     "status": state.status})
        return json_response(accepted, 202)
    errors = await rejection(ctx, execution_id)
    if errors is not None:
        raise _rejected(execution_id, errors)
    return None


def _rejected(execution_id: str, errors: list[str]) -> ApiError:
    return ApiError(422, "the server rejected the playbook", code="rejected",
                    details={"execution_id": execution_id, "errors": errors})


async def start_execution(request: web.Request) -> web.StreamResponse:
    ctx = api_context(request)
    body = await read_body(request, ExecuteBody)
    key = request.headers.get(IDEMPOTENCY_HEADER)
    execution_id = execution_id_for(principal(request).user, key)
    if key and (answer := await _existing(ctx, execution_id)) is not None:
        return answer
    text, name = await _playbook_text(ctx, body)
    bus = ctx.bus
    inbox = bus.nc.new_inbox()
    replies = await bus.nc.subscribe(inbox, max_msgs=1)
    try:
        req = ExecutionRequest(execution_id=execution_id, playbook=text, playbook_file=name,
                               payload=body.payload, reply_to=inbox, labels=body.labels)
        ack = await bus.js.publish(bus.topology.execute_request_subject(),
                                   req.model_dump_json().encode(),
                                   headers={"Nats-Msg-Id": ids.request_msg_id(execution_id)})
        if ack.duplicate:
            # The same key moments ago: that request will answer its own caller, not us.
            return json_response(ExecutionAccepted(execution_id=execution_id, status="submitted"), 202)
        try:
            msg = await replies.next_msg(timeout=ctx.accept_timeout.total_seconds())
        except (TimeoutError, NatsTimeoutError):
            # Stored in the stream: a server that is busy or down will start it later.
            return json_response(ExecutionAccepted(execution_id=execution_id, status="submitted"), 202)
    finally:
        await replies.unsubscribe()
    reply = RequestReply.model_validate_json(msg.data)
    if not reply.accepted:
        raise _rejected(execution_id, reply.errors)
    return json_response(ExecutionAccepted(execution_id=execution_id, status="accepted"), 202)


def _cursor_of(state: ExecutionState) -> str:
    return f"{state.started_at:.6f}:{state.execution_id}"


async def list_executions(request: web.Request) -> web.StreamResponse:
    ctx = api_context(request)
    query = read_query(request, ExecutionListQuery)
    after: tuple[float, str] | None = None
    if query.cursor is not None:
        parsed = _CURSOR.fullmatch(query.cursor)
        if parsed is None:
            raise ApiError(422, "cursor is not one this server gave out")
        after = (float(parsed.group(1)), parsed.group(2))
    # Every state is read: the KV bucket has no index. Fine for thousands; a projection would
    # serve millions.
    skips = Skips("execution")

    async def listable(execution_id: str) -> ExecutionState | None:
        state = await load_state(ctx, execution_id)
        if state is not None:  # what the list shows of it must be readable too
            item_of(state)
            round(state.started_at, 6)
        return state

    every = await read_each(await bucket_keys(ctx.bus.js, "noetl_executions"), listable, skips)
    states = [state for state in every if matches(state, query)]
    # Newest first; the cursor is the (started_at, id) of the last item shown.
    states.sort(key=lambda s: (round(s.started_at, 6), s.execution_id), reverse=True)
    if after is not None:
        states = [s for s in states if (round(s.started_at, 6), s.execution_id) < after]
    page = states[:query.limit]
    more = len(states) > query.limit
    return json_response(ExecutionList(items=[item_of(s) for s in page],
                                       next_cursor=_cursor_of(page[-1]) if more else None,
                                       skipped=[SkippedRecord(key=s.key, reason=s.reason)
                                                for s in skips.items],
                                       counts=status_counts(every, query)))


async def get_execution(request: web.Request) -> web.StreamResponse:
    return json_response(await detail(api_context(request), request.match_info["execution_id"]))


async def cancel_execution(request: web.Request) -> web.StreamResponse:
    ctx = api_context(request)
    execution_id = request.match_info["execution_id"]
    body = await read_body(request, CancelBody) if request.body_exists else CancelBody()
    state = await require_running(ctx, execution_id)
    await request_cancel(ctx.bus, execution_id, reason=body.reason,
                         requested_by=principal(request).user, restarts=state.restarts)
    return json_response(CancelAccepted(execution_id=execution_id), 202)


async def restart_execution(request: web.Request) -> web.StreamResponse:
    ctx = api_context(request)
    execution_id = check_execution_id(request.match_info["execution_id"])
    body = await read_body(request, RestartBody) if request.body_exists else RestartBody()
    try:
        asked = await request_restart(ctx.bus, execution_id, from_step=body.from_step,
                                      workload=body.workload,
                                      requested_by=principal(request).user, latest=body.latest)
    except RestartRefused as exc:
        if exc.unknown:
            raise not_found(f"execution {execution_id}") from None
        raise ApiError(409, str(exc)) from None
    return json_response(RestartAccepted(execution_id=execution_id, restart=asked.restart), 202)


async def replay_execution(request: web.Request) -> web.StreamResponse:
    ctx = api_context(request)
    execution_id = check_execution_id(request.match_info["execution_id"])
    body = await read_body(request, ReplayBody) if request.body_exists else ReplayBody()
    try:
        asked = await request_replay(ctx.bus, execution_id, from_step=body.from_step,
                                     workload=body.workload, requested_by=principal(request).user)
    except ReplayRefused as exc:
        if exc.unknown:
            raise not_found(f"execution {execution_id}") from None
        raise ApiError(409, str(exc)) from None
    return json_response(ReplayAccepted(execution_id=asked.execution_id, replay_of=execution_id,
                                        roots=asked.seed.roots, kept=sorted(asked.seed.steps)), 202)


async def send_signal(request: web.Request) -> web.StreamResponse:
    ctx = api_context(request)
    execution_id, name = request.match_info["execution_id"], request.match_info["name"]
    problem = signal_name_problem(name)
    if problem is not None:
        raise ApiError(422, f'signal name "{name[:ids.MAX_TOKEN_LENGTH]}...": {problem}')
    data = await read_json(request) if request.body_exists else None
    await require_running(ctx, execution_id)
    if not read_query(request, SignalQuery).force:
        # Same check as the CLI's: a signal nothing waits for would be stored and never read.
        problem = await why_unheard(ctx.bus, execution_id, name)
        if problem is not None:
            raise ApiError(409, f"{problem}; signal not sent (force=true sends it anyway)")
    key = request.headers.get(IDEMPOTENCY_HEADER)
    msg_id = ids.signal_msg_id(execution_id, name, key) if key else None
    try:
        seq = await publish_signal(ctx.bus, execution_id, name, data, msg_id=msg_id)
    except ValueError as exc:  # data no router would take (too deep)
        raise ApiError(422, f"signal data: {exc}") from None
    return json_response(SignalSent(execution_id=execution_id, signal=name, seq=seq), 202)


_IDEMPOTENCY_DOC = (IDEMPOTENCY_HEADER, "Repeating a request with the same key (per user) returns "
                    "the same execution instead of starting another")

ENDPOINTS = [
    Endpoint("POST", "/api/executions", start_execution, "Start an execution of a catalog path, "
             "a playbook_id or an inline playbook", "run", "executions", body=ExecuteBody,
             response=ExecutionAccepted, status=202, errors=(404, 422), headers=(_IDEMPOTENCY_DOC,)),
    Endpoint("GET", "/api/executions", list_executions, "Executions, newest first, filtered and "
             "paginated", "read", "executions", query=ExecutionListQuery, response=ExecutionList,
             errors=(422,)),
    Endpoint("GET", "/api/executions/{execution_id}", get_execution, "Status, result, steps, ctx "
             "and vars of one execution", "read", "executions", response=ExecutionDetail,
             errors=(404,)),
    Endpoint("POST", "/api/executions/{execution_id}/cancel", cancel_execution, "Ask for an "
             "execution (and its children) to be cancelled", "control", "executions",
             body=CancelBody, body_required=False, response=CancelAccepted, status=202,
             errors=(404, 409)),
    Endpoint("POST", "/api/executions/{execution_id}/restart", restart_execution, "Reopen a "
             "failed or cancelled execution (or any one from a step): finished steps keep their "
             "results, the failed step or the step named runs again with everything downstream",
             "control", "executions", body=RestartBody, body_required=False,
             response=RestartAccepted, status=202, errors=(404, 409, 422)),
    Endpoint("POST", "/api/executions/{execution_id}/replay", replay_execution, "Run an "
             "execution again as a new one linked to it: the steps before the step named keep "
             "the original's results, the step and everything downstream run", "run",
             "executions", body=ReplayBody, body_required=False, response=ReplayAccepted,
             status=202, errors=(404, 409, 422)),
    Endpoint("POST", "/api/executions/{execution_id}/signals/{name}", send_signal, "Send an "
             "external signal (the body is its data, any JSON)", "control", "executions",
             any_body=True, query=SignalQuery, response=SignalSent, status=202,
             errors=(404, 409, 422),
             headers=(("Idempotency-Key", "A repeated signal with the same key is stored once"),)),
]

