"""What the browser tests of the web UI share: a real stack (nats-server, `server --http`, a
worker) with playbooks registered, Debian's headless Chromium, and logging in as a person does.

`NOETL_STREAM_SCREENSHOTS=DIR` makes the tests that use `shot` write pictures of the pages
there (`make screenshots` refreshes docs/ with it).
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from playwright.async_api import Browser, Page, expect

from noetl_stream.testing.waiting import assert_eventually

CLI = str(Path(sys.executable).parent / "noetl-stream")
CHROMIUM = Path("/usr/bin/chromium")
PLAYBOOKS = Path(__file__).with_name("playbooks") / "ui"
PASSWORD = "a-long-password"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
WAIT_MS = 30_000


async def cli(*args: str, stdin: bytes | None = None) -> str:
    proc = await asyncio.create_subprocess_exec(
        CLI, *args, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(stdin or b""), 60)
    assert proc.returncode == 0, err.decode()
    return out.decode()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class Stack:
    base: str
    token: str  # an operator's session, for setting up through the API

    async def call(self, method: str, path: str, body: Any = None) -> Any:
        auth = {"Authorization": f"Bearer {self.token}"}
        async with aiohttp.ClientSession(headers=auth) as http, \
                http.request(method, self.base + path, json=body) as resp:
            assert resp.status < 300, await resp.text()
            return await resp.json()

    async def start(self, path: str, payload: dict[str, Any] | None = None,
                    labels: dict[str, str] | None = None) -> str:
        body = {"path": path, "payload": payload or {}, "labels": labels or {}}
        execution_id: str = (await self.call("POST", "/api/executions", body))["execution_id"]
        return execution_id


async def _stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), 20)
        except TimeoutError:
            proc.kill()
            await proc.wait()


@asynccontextmanager
async def running_stack(nats_url: str, playbooks: list[Path]) -> AsyncIterator[Stack]:
    """Users ada (operator) and vic (viewer), a server with its HTTP API, one worker."""
    url = ["--nats-url", nats_url]
    await cli("init", *url)
    for user, role in (("ada", "operator"), ("vic", "viewer")):
        await cli("user", "add", user, "--role", role, "--password-stdin", *url,
                  stdin=PASSWORD.encode() + b"\n")
    port = free_port()
    server = await asyncio.create_subprocess_exec(
        CLI, "server", *url, "--http", f"127.0.0.1:{port}", stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL, env=dict(os.environ))
    worker = await asyncio.create_subprocess_exec(
        CLI, "worker", *url, "--python-processes", "2", stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL, env=dict(os.environ))
    base = f"http://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as http:
            async def login() -> str:
                try:
                    async with http.post(base + "/api/sessions",
                                         json={"user": "ada", "password": PASSWORD}) as resp:
                        assert resp.status == 201
                        token: str = (await resp.json())["token"]
                        return token
                except aiohttp.ClientConnectionError as exc:
                    raise AssertionError("not listening yet") from exc

            token = await assert_eventually(login, timeout_s=30, interval_s=0.1)
            for file in playbooks:
                async with http.post(base + "/api/catalog", json={"content": file.read_text()},
                                     headers={"Authorization": f"Bearer {token}"}) as resp:
                    assert resp.status == 201, await resp.text()
        yield Stack(base, token)
    finally:
        await _stop(worker)
        await _stop(server)


async def shot(page: Page, name: str, height: int | None = None) -> None:
    """A picture of the page as it is (its top `height` pixels, else all of it), when
    NOETL_STREAM_SCREENSHOTS names a folder.
    """
    folder = os.environ.get("NOETL_STREAM_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        width = page.viewport_size["width"] if page.viewport_size else 1360
        clip = {"x": 0, "y": 0, "width": width, "height": height} if height else None
        await page.screenshot(path=str(Path(folder) / name), full_page=True, clip=clip)


async def log_in(browser: Browser, base: str, user: str, then: str = "/",
                 picture: str | None = None) -> Page:
    context = await browser.new_context(viewport={"width": 1360, "height": 900})
    page = await context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    await page.goto(base + then)
    await expect(page).to_have_url(re.compile(r"/login\?next="), timeout=WAIT_MS)
    await page.fill("#login-user", user)
    await page.fill("#login-password", PASSWORD)
    if picture:
        await shot(page, picture)
    await page.click("#login-submit")
    await expect(page).to_have_url(base + then, timeout=WAIT_MS)
    await expect(page.locator("#who")).to_contain_text(user)
    # From here on nothing may fail: no script error, no refused request, no blocked resource.
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.set_default_timeout(WAIT_MS)
    setattr(page, "script_errors", errors)  # noqa: B010 - read back by the test
    return page
