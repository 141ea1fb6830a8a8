"""Another web site's page against the HTTP API in a real browser (Debian's headless Chromium):
`server --no-auth` and `run --ui` are real processes, the attacker's page is served by a real
local HTTP server on another origin, and the login page's `next=` must never leave the site.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import quote

import aiohttp
import pytest
from aiohttp import web
from cli import CLI
from playwright.async_api import Browser, expect

from noetl_stream import jsonutil
from noetl_stream.bus.nats_server import NatsServer
from noetl_stream.testing.waiting import assert_eventually

pytestmark = pytest.mark.e2e

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update"]
PLAYBOOKS = Path(__file__).with_name("playbooks") / "ui"
PASSWORD = "a-long-password"
PLANTED = """apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: planted}
workflow:
  - step: start
    tool: {kind: noop}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def attack_page(api: str) -> str:
    """What a page of another site sends without asking: a text/plain POST (fetch no-cors) and
    a text/plain form whose body is the same JSON, then says it is done.
    """
    body = jsonutil.dumps_str({"playbook": PLANTED})
    name, value = body[:-2], body[-2:]  # the form's `name=value` body is the JSON again
    return f"""<!doctype html><html><body>
<form id="f" method="post" enctype="text/plain" action="{api}/api/executions" target="sink">
<input type="hidden" name='{name}' value='{value}'></form><iframe name="sink"></iframe>
<script>
fetch({jsonutil.dumps_str(api + "/api/executions")}, {{method: "POST", mode: "no-cors",
  headers: {{"Content-Type": "text/plain"}}, body: {jsonutil.dumps_str(body)}}})
  .catch(() => null).then(() => {{ document.getElementById("f").submit(); window.sent = true; }});
</script></body></html>"""



@pytest.fixture
async def attacker() -> AsyncIterator[tuple[str, dict[str, str]]]:
    """A real HTTP server on another origin; the test sets the page it serves."""
    pages: dict[str, str] = {}

    async def page(request: web.Request) -> web.Response:
        return web.Response(text=pages["/"], content_type="text/html")

    app = web.Application()
    app.router.add_get("/", page)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    try:
        yield f"http://127.0.0.1:{port}", pages
    finally:
        await runner.cleanup()


async def _listening(http: aiohttp.ClientSession, base: str) -> None:
    async def up() -> None:
        try:
            async with http.get(base + "/health") as resp:
                assert resp.status == 200
        except aiohttp.ClientConnectionError as exc:
            raise AssertionError("not listening yet") from exc

    await assert_eventually(up, timeout_s=30, interval_s=0.1)


async def _stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), 20)
        except TimeoutError:
            proc.kill()
            await proc.wait()


async def test_a_page_of_another_site_cannot_start_an_execution_on_a_no_auth_server(
        nats_server: NatsServer, browser: Browser,
        attacker: tuple[str, dict[str, str]]) -> None:
    url = ["--nats-url", nats_server.url]
    init = await asyncio.create_subprocess_exec(CLI, "init", *url)
    assert await init.wait() == 0
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = await asyncio.create_subprocess_exec(
        CLI, "server", *url, "--http", f"127.0.0.1:{port}", "--no-auth",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL, env=dict(os.environ))
    try:
        async with aiohttp.ClientSession() as http:
            await _listening(http, base)
            origin, pages = attacker
            pages["/"] = attack_page(base)
            page = await browser.new_page()
            await page.goto(origin + "/")
            await page.wait_for_function("window.sent === true", timeout=30_000)
            await asyncio.sleep(2)  # the form's POST lands in the frame after `sent`

            async with http.get(base + "/api/executions") as resp:
                assert resp.status == 200
                assert (await resp.json())["items"] == []
            # Same requests by hand: refused with a reason, not merely unseen.
            body = jsonutil.dumps({"playbook": PLANTED})
            async with http.post(base + "/api/executions", data=body,
                                 headers={"Content-Type": "text/plain"}) as resp:
                assert resp.status == 415, await resp.text()
            async with http.post(base + "/api/executions", data=body,
                                 headers={"Content-Type": "application/json",
                                          "Origin": origin}) as resp:
                assert resp.status == 403, await resp.text()
            # DNS rebinding: the attacker's own name pointed at this address.
            async with http.get(base + "/api/credentials",
                                headers={"Host": f"attacker.example:{port}"}) as resp:
                assert resp.status == 403, await resp.text()
            # The API's own page and programs still work.
            async with http.post(base + "/api/executions", data=body,
                                 headers={"Content-Type": "application/json",
                                          "Origin": base}) as resp:
                assert resp.status in (200, 201, 202), await resp.text()
            async with http.get(base + "/api/executions") as resp:
                assert len((await resp.json())["items"]) == 1
    finally:
        await _stop(server)


async def test_run_ui_answers_only_its_own_token(browser: Browser,
                                                 attacker: tuple[str, dict[str, str]]) -> None:
    proc = await asyncio.create_subprocess_exec(
        CLI, "run", str(PLAYBOOKS / "steps.yaml"), "--ui", "--set", "pause=0",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL, env=dict(os.environ))
    assert proc.stderr is not None
    try:
        line = ""
        while "the UI stays at" not in line:
            line = (await asyncio.wait_for(proc.stderr.readline(), 90)).decode()
            assert line, "run ended early"
        address = line.split("the UI stays at ", 1)[1].split(" until", 1)[0]
        found = re.fullmatch(r"(http://127\.0\.0\.1:\d+)/#token=([A-Za-z0-9_-]{40,})", address)
        assert found, address
        base, token = found.groups()
        async with aiohttp.ClientSession() as http:
            async with http.get(base + "/api/executions") as resp:
                assert resp.status == 401
            async with http.get(base + "/api/executions",
                                headers={"Authorization": f"Bearer {token}"}) as resp:
                assert resp.status == 200 and len((await resp.json())["items"]) == 1
            origin, pages = attacker
            pages["/"] = attack_page(base)
            page = await browser.new_page()
            await page.goto(origin + "/")
            await page.wait_for_function("window.sent === true", timeout=30_000)
            await asyncio.sleep(2)
            async with http.get(base + "/api/executions",
                                headers={"Authorization": f"Bearer {token}"}) as resp:
                assert len((await resp.json())["items"]) == 1
        # The printed address logs the browser in and leaves no token in the address bar.
        page = await browser.new_page()
        await page.goto(address)
        await expect(page.locator("#executions tbody tr")).to_have_count(1, timeout=30_000)
        assert "token" not in page.url
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGINT)
            try:
                await asyncio.wait_for(proc.wait(), 30)
            except TimeoutError:
                proc.kill()
                await proc.wait()


@pytest.mark.parametrize("next_value", ["/\\127.0.0.2:9/evil", "/\t/127.0.0.2:9/evil",
                                        "//127.0.0.2:9/evil", "/\\/127.0.0.2:9/evil"])
async def test_login_next_stays_on_the_site(nats_server: NatsServer, browser: Browser,
                                            next_value: str) -> None:
    url = ["--nats-url", nats_server.url]
    for args, stdin in ((["init"], b""),
                        (["user", "add", "ada", "--role", "viewer", "--password-stdin"],
                         PASSWORD.encode() + b"\n")):
        proc = await asyncio.create_subprocess_exec(CLI, *args, *url, stdin=asyncio.subprocess.PIPE)
        await proc.communicate(stdin)
        assert proc.returncode == 0
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    server = await asyncio.create_subprocess_exec(
        CLI, "server", *url, "--http", f"127.0.0.1:{port}", stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL, env=dict(os.environ))
    try:
        async with aiohttp.ClientSession() as http:
            await _listening(http, base)
        page = await browser.new_page()
        await page.goto(f"{base}/login?next={quote(next_value, safe='')}")
        await page.fill("#login-user", "ada")
        await page.fill("#login-password", PASSWORD)
        await page.click("#login-submit")
        await expect(page).to_have_url(base + "/", timeout=30_000)
    finally:
        await _stop(server)
