"""What an execution's playbook looks like as a net, and what the execution waits for now.

Both read the committed router state and the playbook text it names; the UI draws the first and
shows the second beside the live marking.
"""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web

from noetl_stream.api.context import api_context
from noetl_stream.api.endpoints import Endpoint, json_response
from noetl_stream.api.playbook_lookup import state_and_playbook
from noetl_stream.api.ui.net import NetView, net_of
from noetl_stream.router.explain import explain


async def execution_net(request: web.Request) -> web.StreamResponse:
    _, playbook = await state_and_playbook(api_context(request), request.match_info["execution_id"])
    return json_response(net_of(playbook))


async def explain_execution(request: web.Request) -> web.StreamResponse:
    state, playbook = await state_and_playbook(api_context(request),
                                               request.match_info["execution_id"])
    report: dict[str, Any] = explain(state, playbook, time.time())
    return json_response(report)


ENDPOINTS = [
    Endpoint("GET", "/api/executions/{execution_id}/net", execution_net, "The execution's "
             "playbook as a net: steps, arcs with guards, joins, and a layered layout to draw",
             "read", "executions", response=NetView, errors=(404, 409, 422)),
    Endpoint("GET", "/api/executions/{execution_id}/explain", explain_execution, "What the "
             "execution waits for (the report of `noetl-stream status --json`)", "read",
             "executions", errors=(404, 409, 422)),
]
