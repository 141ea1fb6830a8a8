"""Both HTTP listeners (the API and `--metrics`) bind through http_site.serve_app: a port that is
taken is an infrastructure error naming the address and what wanted it."""

from __future__ import annotations

import socket

import aiohttp
import pytest
from aiohttp import web

from noetl_stream.errors import InfrastructureError
from noetl_stream.http_site import serve_app


async def _hello(request: web.Request) -> web.Response:
    return web.Response(text="hello")


def _app() -> web.Application:
    app = web.Application()
    app.router.add_get("/", _hello)
    return app


async def test_serves_on_the_bound_port_and_refuses_a_taken_one() -> None:
    async with serve_app(_app(), "127.0.0.1", 0, what="the test app") as url:
        async with aiohttp.ClientSession() as session, session.get(url + "/") as resp:
            assert await resp.text() == "hello"
        port = int(url.rsplit(":", 1)[1])
        with pytest.raises(InfrastructureError, match=rf"cannot serve metrics on 127.0.0.1:{port}"):
            async with serve_app(_app(), "127.0.0.1", port, what="metrics"):
                pass


async def test_a_port_held_by_another_socket_is_refused() -> None:
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        with pytest.raises(InfrastructureError, match="cannot serve the HTTP API"):
            async with serve_app(_app(), "127.0.0.1", port, what="the HTTP API"):
                pass
