"""Running the HTTP API on a real local port for tests, and a small JSON client for it."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp.test_utils import TestServer

from noetl_stream.api import create_app, open_authenticator
from noetl_stream.api.auth import Authenticator
from noetl_stream.api.context import CONTEXT, ApiContext
from noetl_stream.bus.connection import Bus


@dataclass
class Api:
    url: str
    http: aiohttp.ClientSession
    auth: Authenticator | None
    token: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    context: ApiContext | None = None  # the app's own state, for tests that look inside

    def _headers(self, token: str | None, extra: dict[str, str] | None) -> dict[str, str]:
        out = dict(self.headers)
        chosen = token if token is not None else self.token
        if chosen:
            out["Authorization"] = f"Bearer {chosen}"
        out.update(extra or {})
        return out

    async def call(self, method: str, path: str, *, json: Any = None, data: Any = None,
                   token: str | None = None, headers: dict[str, str] | None = None,
                   params: dict[str, str] | None = None) -> tuple[int, Any]:
        async with self.http.request(method, self.url + path, json=json, data=data, params=params,
                                     headers=self._headers(token, headers)) as resp:
            text = await resp.text()
            body = await resp.json(content_type=None) if text and \
                resp.content_type == "application/json" else text
            return resp.status, body


@contextlib.asynccontextmanager
async def running_api(bus: Bus, *, auth: bool = True) -> AsyncIterator[Api]:
    authenticator = await open_authenticator(bus) if auth else None
    app = await create_app(bus, auth=authenticator)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        async with aiohttp.ClientSession() as http:
            yield Api(str(server.make_url("")).rstrip("/"), http, authenticator,
                      context=app[CONTEXT])
    finally:
        await server.close()


async def admin_key(api: Api, user: str = "root") -> str:
    """An admin user and API key, made directly in the stores (as `noetl-stream apikey` does)."""
    assert api.auth is not None
    if await api.auth.users.get(user) is None:
        await api.auth.users.add(user, ["admin"], None)
    key, _ = await api.auth.keys.create(user, ["admin"])
    return key
