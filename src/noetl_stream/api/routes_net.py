"""What a playbook looks like as a net (a running execution's, or a registered one before it
runs), and what an execution waits for now.

An execution's routes read its committed router state and the playbook text it names; the UI
draws the net and shows the report beside the live marking.
"""

from __future__ import annotations

import time

from aiohttp import web

from noetl_stream.api.context import api_context
from noetl_stream.api.endpoints import Endpoint, json_response
from noetl_stream.api.errors import not_found
from noetl_stream.api.playbook_lookup import playbook_by_key, state_and_playbook
from noetl_stream.api.routes_catalog import PLAYBOOK_ID
from noetl_stream.api.ui.net import NetView, net_of
from noetl_stream.router.explain import explain
from noetl_stream.server.marking_history import marking_history
from noetl_stream.state.results import ResultStore
from noetl_stream.state.step_results import StepResults


async def execution_net(request: web.Request) -> web.StreamResponse:
    _, playbook = await state_and_playbook(api_context(request), request.match_info["execution_id"])
    return json_response(net_of(playbook))


async def playbook_net(request: web.Request) -> web.StreamResponse:
    ctx = api_context(request)
    playbook_id = request.match_info["playbook_id"]
    # A text the installed kinds do not read raises PlaybookError: a 422 with every issue.
    playbook = await playbook_by_key(ctx, playbook_id) if PLAYBOOK_ID.fullmatch(playbook_id) else None
    if playbook is None:
        raise not_found(f'playbook_id "{playbook_id}"')
    return json_response(net_of(playbook))


async def explain_execution(request: web.Request) -> web.StreamResponse:
    state, playbook = await state_and_playbook(api_context(request),
                                               request.match_info["execution_id"])
    # The report shows every step's status and the result, stored beside the state.
    ctx = api_context(request)
    await StepResults(ctx.bus.js, ResultStore(ctx.bus.js)).load(state, steps=False)
    report = explain(state, playbook, time.time())
    return json_response(report)


async def execution_marking(request: web.Request) -> web.StreamResponse:
    ctx = api_context(request)
    execution_id = request.match_info["execution_id"]
    history = await marking_history(ctx.bus, execution_id)
    if history is None:
        await state_and_playbook(ctx, execution_id)  # 404 / 409 with the reason
        raise not_found(f'the log of execution "{execution_id}"')
    return json_response(history)


ENDPOINTS = [
    Endpoint("GET", "/api/executions/{execution_id}/net", execution_net, "The execution's "
             "playbook as a net: steps, arcs with guards, joins, and a layered layout to draw",
             "read", "executions", response=NetView, errors=(404, 409, 422)),
    Endpoint("GET", "/api/playbooks/{playbook_id}/net", playbook_net, "A registered playbook "
             "(by its content key, the catalog's playbook_id) as a net, laid out to draw", "read",
             "catalog", response=NetView, errors=(404, 422)),
    Endpoint("GET", "/api/executions/{execution_id}/marking", execution_marking, "The "
             "execution's marking after each event it applied (each step's status, the steps "
             "with a run in flight, waiting joins), rebuilt from its log", "read", "executions",
             errors=(404, 409)),
    Endpoint("GET", "/api/executions/{execution_id}/explain", explain_execution, "What the "
             "execution waits for (the report of `noetl-stream status --json`)", "read",
             "executions", errors=(404, 409, 422)),
]
