"""The http tool's request and response options against a real local aiohttp server."""

from __future__ import annotations

import asyncio
import base64
import socket
import ssl
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from noetl_stream.tools.base import TaskCall
from noetl_stream.tools.http import HttpTool

pytestmark = pytest.mark.integration

PNG_BYTES = b"\x89PNG\r\n\x1a\n\x00\xff\xfe"


def options_app(release: asyncio.Event) -> web.Application:
    async def form(request: web.Request) -> web.Response:
        fields = await request.post()
        return web.json_response({"content_type": request.content_type,
                                  "form": {k: str(v) for k, v in fields.items()}})

    async def redirect(request: web.Request) -> web.Response:
        raise web.HTTPFound("/target")

    async def target(request: web.Request) -> web.Response:
        return web.json_response({"arrived": True})

    async def text(request: web.Request) -> web.Response:
        return web.Response(body="caf\xe9 ol\xe9".encode("latin-1"),
                            content_type="text/plain", charset="latin-1")

    async def json_text(request: web.Request) -> web.Response:
        return web.Response(text='{"n": 1}', content_type="text/plain")

    async def binary(request: web.Request) -> web.Response:
        return web.Response(body=PNG_BYTES, content_type="image/png")

    async def html(request: web.Request) -> web.Response:
        return web.Response(text="<html>maintenance</html>", content_type="text/html")

    async def slow(request: web.Request) -> web.Response:
        await release.wait()
        return web.json_response({"late": True})

    async def headers(request: web.Request) -> web.Response:
        return web.json_response(dict(request.headers))

    app = web.Application()
    app.router.add_post("/form", form)
    app.router.add_get("/redirect", redirect)
    app.router.add_get("/target", target)
    app.router.add_get("/text", text)
    app.router.add_get("/json-as-text", json_text)
    app.router.add_get("/binary", binary)
    app.router.add_get("/html", html)
    app.router.add_get("/slow", slow)
    app.router.add_route("*", "/headers", headers)
    return app


async def _serve(**kwargs: Any) -> AsyncIterator[str]:
    release = asyncio.Event()
    server = TestServer(options_app(release), host="127.0.0.1")
    await server.start_server(**kwargs)
    try:
        yield str(server.make_url("")).rstrip("/")
    finally:
        release.set()  # let a held /slow reply finish so the server closes at once
        await server.close()


@pytest.fixture
async def base_url() -> AsyncIterator[str]:
    async for url in _serve():
        yield url


@pytest.fixture
def tls_context(tmp_path: Path) -> ssl.SSLContext:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    return context


@pytest.fixture
async def tls_url(tls_context: ssl.SSLContext) -> AsyncIterator[str]:
    async for url in _serve(ssl=tls_context):
        yield url


@pytest.fixture
def unanswered_port() -> Iterator[int]:
    """A port whose listen queue is full, so a new connection neither succeeds nor is refused."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = []
    for _ in range(3):
        filler = socket.socket()
        filler.setblocking(False)
        filler.connect_ex(("127.0.0.1", port))
        fillers.append(filler)
    try:
        yield port
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


def call(spec: dict[str, Any] | None = None, **config: Any) -> TaskCall:
    return TaskCall(execution_id="e1", step="fetch", task="t", kind="http", config=config, input={},
                    spec=spec or {}, idempotency_key="e1.fetch.1:None:t:1")


async def test_form_is_sent_url_encoded(http_tool: HttpTool, base_url: str) -> None:
    outcome = await http_tool.run(call(url=f"{base_url}/form", method="POST",
                                       form={"name": "a b&c", "n": 2, "ok": True, "skip": None}))

    assert outcome.ok, outcome.error
    assert outcome.result == {"content_type": "application/x-www-form-urlencoded",
                              "form": {"name": "a b&c", "n": "2", "ok": "true"}}


async def test_redirects_are_followed_by_default(http_tool: HttpTool, base_url: str) -> None:
    outcome = await http_tool.run(call(url=f"{base_url}/redirect"))

    assert outcome.ok
    assert outcome.result == {"arrived": True}
    assert outcome.http is not None and outcome.http["status"] == 200


async def test_follow_redirects_false_returns_the_redirect_itself(http_tool: HttpTool,
                                                                  base_url: str) -> None:
    outcome = await http_tool.run(call(url=f"{base_url}/redirect", follow_redirects=False))

    assert outcome.ok
    assert outcome.http is not None
    assert outcome.http["status"] == 302
    assert outcome.http["headers"]["Location"] == "/target"


async def test_response_type_json_parses_a_json_body_under_any_content_type(
        http_tool: HttpTool, base_url: str) -> None:
    default = await http_tool.run(call(url=f"{base_url}/json-as-text"))
    typed = await http_tool.run(call(url=f"{base_url}/json-as-text", response_type="json"))

    assert default.result == {"n": 1}
    assert typed.ok and typed.result == {"n": 1}


async def test_response_type_json_with_a_non_json_body_is_an_error(http_tool: HttpTool,
                                                                   base_url: str) -> None:
    outcome = await http_tool.run(call(url=f"{base_url}/html", response_type="json"))

    assert not outcome.ok
    assert outcome.error is not None
    assert outcome.error["kind"] == "response"
    assert "not JSON" in outcome.error["message"] and "text/html" in outcome.error["message"]
    assert outcome.http is not None and outcome.http["status"] == 200


async def test_non_json_body_with_the_default_type_stays_text(http_tool: HttpTool,
                                                              base_url: str) -> None:
    outcome = await http_tool.run(call(url=f"{base_url}/html"))

    assert outcome.ok
    assert outcome.result == "<html>maintenance</html>"


async def test_response_type_text_decodes_with_the_reply_charset(http_tool: HttpTool,
                                                                 base_url: str) -> None:
    text = await http_tool.run(call(url=f"{base_url}/text", response_type="text"))
    json_as_text = await http_tool.run(call(url=f"{base_url}/json-as-text", response_type="text"))

    assert text.result == "caf\xe9 ol\xe9"
    assert json_as_text.result == '{"n": 1}'


async def test_response_type_binary_is_base64_with_size_and_content_type(http_tool: HttpTool,
                                                                         base_url: str) -> None:
    outcome = await http_tool.run(call(url=f"{base_url}/binary", response_type="binary"))

    assert outcome.ok
    result = outcome.result
    assert result["encoding"] == "base64"
    assert base64.b64decode(result["data"]) == PNG_BYTES
    assert result["size"] == len(PNG_BYTES)
    assert result["content_type"] == "image/png"


async def test_unknown_response_type_is_a_config_error(http_tool: HttpTool, base_url: str) -> None:
    outcome = await http_tool.run(call(url=f"{base_url}/text", response_type="xml"))

    assert outcome.error is not None and outcome.error["kind"] == "config"
    assert "json, text, binary" in outcome.error["message"]


async def test_read_timeout_fails_when_the_reply_stalls(http_tool: HttpTool, base_url: str) -> None:
    outcome = await http_tool.run(call(url=f"{base_url}/slow", timeout={"connect": 5, "read": 0.2}))

    assert outcome.error is not None
    assert outcome.error["kind"] == "timeout" and outcome.error["retryable"] is True
    assert "read timed out after 0.2s" in outcome.error["message"]


async def test_number_timeout_caps_the_whole_request(http_tool: HttpTool, base_url: str) -> None:
    outcome = await http_tool.run(call(url=f"{base_url}/slow", timeout=0.2))

    assert outcome.error is not None
    assert "timed out after 0.2s" in outcome.error["message"]


async def test_connect_timeout_fails_when_nobody_accepts(http_tool: HttpTool,
                                                         unanswered_port: int) -> None:
    outcome = await http_tool.run(call(url=f"http://127.0.0.1:{unanswered_port}/",
                                       timeout={"connect": 0.2, "read": 5}))

    assert outcome.error is not None
    assert outcome.error["kind"] == "timeout"
    assert "connect timed out after 0.2s" in outcome.error["message"]


async def test_bad_timeout_is_a_config_error(http_tool: HttpTool, base_url: str) -> None:
    outcome = await http_tool.run(call(url=f"{base_url}/text", timeout={"write": 1}))

    assert outcome.error is not None and outcome.error["kind"] == "config"


async def test_idempotency_key_header_is_sent_when_the_task_is_idempotent(http_tool: HttpTool,
                                                                          base_url: str) -> None:
    idempotent = await http_tool.run(call({"idempotent": True}, url=f"{base_url}/headers",
                                          method="POST"))
    plain = await http_tool.run(call(url=f"{base_url}/headers", method="POST"))
    own = await http_tool.run(call({"idempotent": True}, url=f"{base_url}/headers",
                                   headers={"idempotency-key": "mine"}))

    assert idempotent.result["Idempotency-Key"] == "e1.fetch.1:None:t:1"
    assert "Idempotency-Key" not in plain.result
    assert [v for k, v in own.result.items() if k.lower() == "idempotency-key"] == ["mine"]


async def test_self_signed_tls_fails_unless_verify_is_false(http_tool: HttpTool, tls_url: str) -> None:
    assert tls_url.startswith("https://")

    checked = await http_tool.run(call(url=f"{tls_url}/target"))
    unchecked = await http_tool.run(call(url=f"{tls_url}/target", verify=False))
    legacy = await http_tool.run(call(url=f"{tls_url}/target", verify_ssl="false"))

    assert checked.error is not None and checked.error["kind"] == "connection"
    assert "certificate" in checked.error["message"].lower()
    assert unchecked.ok and unchecked.result == {"arrived": True}
    assert legacy.ok
