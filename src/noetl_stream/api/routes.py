"""The route table: every endpoint of every route module, plus the OpenAPI document itself."""

from __future__ import annotations

from functools import cache

from aiohttp import web

from noetl_stream import jsonutil
from noetl_stream.api import (
    routes_catalog,
    routes_credentials,
    routes_events,
    routes_executions,
    routes_hooks,
    routes_net,
    routes_ops,
    routes_sessions,
    routes_triggers,
    routes_vars,
)
from noetl_stream.api.endpoints import Endpoint
from noetl_stream.api.openapi import build_openapi
from noetl_stream.jsonutil import JsonObject


async def openapi_document(request: web.Request) -> web.StreamResponse:
    return web.Response(body=jsonutil.dumps(api_document()), content_type="application/json")


def all_endpoints() -> list[Endpoint]:
    return [
        *routes_ops.ENDPOINTS,
        *routes_sessions.ENDPOINTS,
        *routes_catalog.ENDPOINTS,
        *routes_executions.ENDPOINTS,
        *routes_events.ENDPOINTS,
        *routes_net.ENDPOINTS,
        *routes_vars.ENDPOINTS,
        *routes_credentials.ENDPOINTS,
        *routes_hooks.ENDPOINTS,
        *routes_triggers.ENDPOINTS,
        Endpoint("GET", "/api/openapi.json", openapi_document, "This API's OpenAPI 3.1 document",
                 "read", "ops"),
    ]


@cache
def api_document() -> JsonObject:
    """The OpenAPI document of every route the app serves."""
    return build_openapi(all_endpoints())
