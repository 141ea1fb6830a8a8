"""The aiohttp application of the control-plane API, and serving it on a port.

The API keeps no state of its own: every handler reads and writes the NATS streams and KV buckets
the CLI, server and worker use, so any number of API processes can run side by side.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from datetime import timedelta

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from noetl_stream import config
from noetl_stream.api.auth import ENDPOINTS, Authenticator, auth_middleware
from noetl_stream.api.context import CONTEXT, ApiContext
from noetl_stream.api.endpoints import Endpoint
from noetl_stream.api.errors import error_middleware
from noetl_stream.api.request_guard import request_guard
from noetl_stream.api.routes import all_endpoints
from noetl_stream.api.ui.routes import ui_endpoints
from noetl_stream.bus.connection import Bus, own_connection
from noetl_stream.http_site import serve_app
from noetl_stream.state.auth_cache import AuthCache
from noetl_stream.state.credentials import CredentialStore
from noetl_stream.state.crypto import SecretBox
from noetl_stream.state.sessions import DEFAULT_SESSION_TTL, SessionStore
from noetl_stream.state.users import ApiKeyStore, UserStore
from noetl_stream.tools.registry import installed_kinds

log = logging.getLogger("noetl_stream.api")

MAX_BODY_BYTES = 1024 * 1024


async def open_authenticator(bus: Bus, *, session_ttl: timedelta = DEFAULT_SESSION_TTL) -> Authenticator:
    return Authenticator(await UserStore.open(bus.js), await ApiKeyStore.open(bus.js),
                         await SessionStore.open(bus.js, ttl=session_ttl))


def _cors(origin: str) -> Middleware:
    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        allow = {"Access-Control-Allow-Origin": origin, "Vary": "Origin",
                 "Access-Control-Allow-Headers": "Authorization, Content-Type, Idempotency-Key, "
                                                 "Last-Event-ID",
                 "Access-Control-Allow-Methods": "GET, POST, PUT, DELETE, OPTIONS"}
        if request.method == "OPTIONS":
            return web.Response(status=204, headers=allow)
        response = await handler(request)
        if not response.prepared:  # a started stream (SSE) has sent its headers already
            response.headers.update(allow)
        return response

    return middleware


async def create_app(bus: Bus, *, auth: Authenticator | None, cors_origin: str | None = None,
                     box: SecretBox | None = None,
                     accept_timeout: timedelta = timedelta(seconds=10),
                     run_token: str | None = None) -> web.Application:
    """The API on `bus`; `auth=None` turns authentication off (every caller is an admin, or
    with `run_token` every caller that sends it). Every route is guarded against other web
    sites' pages (api/request_guard.py), authentication or not.
    """
    box = box or SecretBox.from_env(config.home_dir())
    ctx = ApiContext(bus=bus, auth=auth, credentials=await CredentialStore.open(bus.js, box),
                     auth_cache=await AuthCache.open(bus.js, box),
                     executions=await bus.js.key_value("noetl_executions"),
                     catalog=await bus.js.key_value("noetl_catalog"),
                     vars=await bus.js.key_value("noetl_vars"), kinds=installed_kinds(),
                     accept_timeout=accept_timeout)
    middlewares: list[Middleware] = [
        error_middleware, request_guard(cors_origin=cors_origin, check_host=auth is None),
        auth_middleware(auth, run_token=run_token)]
    if cors_origin:
        middlewares.insert(0, _cors(cors_origin))
    app = web.Application(middlewares=middlewares, client_max_size=MAX_BODY_BYTES)
    app[CONTEXT] = ctx
    table: dict[object, Endpoint] = {}
    for ep in [*all_endpoints(), *ui_endpoints()]:
        route = app.router.add_route(ep.method, ep.route_path or ep.path, ep.handler)
        table[route] = ep
    app[ENDPOINTS] = table
    return app


@contextlib.asynccontextmanager
async def serve(bus: Bus, *, host: str, port: int, auth: bool = True,
                cors_origin: str | None = None, run_token: str | None = None) -> AsyncIterator[str]:
    """Serve the API on host:port for the duration of the block; yields its base URL. The API
    speaks to NATS on a connection of its own: whatever a caller makes it do, nats-server can
    only cut that connection, never the one the server's router and workers consume on.
    """
    async with own_connection(bus, "noetl-stream-api") as api_bus:
        authenticator = await open_authenticator(api_bus) if auth else None
        if authenticator is None and run_token is None:
            log.warning("AUTHENTICATION IS OFF (--no-auth): anyone who can reach %s:%s is an "
                        "admin, including reading credentials in clear", host, port)
        app = await create_app(api_bus, auth=authenticator, cors_origin=cors_origin,
                               run_token=run_token)
        async with serve_app(app, host, port, what="the HTTP API",
                             access_log=logging.getLogger("noetl_stream.api.access")) as url:
            yield url
