"""The Triggers page in a real browser (Debian's headless Chromium, driven by Playwright) against
a real nats-server, `server --http` and a worker: an operator sees a trigger's state, source,
next runs and history, pauses, fires and resumes it with the buttons; a viewer sees the same
and gets no buttons.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from playwright.async_api import Browser, expect
from web_ui import CLI, PASSWORD, Stack, _stop, cli, free_port, log_in

from noetl_stream.bus.nats_server import NatsServer
from noetl_stream.testing.waiting import assert_eventually

pytestmark = pytest.mark.e2e

EXAMPLES = Path(__file__).resolve().parents[2] / "playbooks" / "examples" / "triggers"


@pytest.fixture
async def trigger_stack(nats_server: NatsServer) -> AsyncIterator[Stack]:
    url = ["--nats-url", nats_server.url]
    await cli("init", *url)
    for user, role in (("ada", "operator"), ("vic", "viewer")):
        await cli("user", "add", user, "--role", role, "--password-stdin", *url,
                  stdin=PASSWORD.encode() + b"\n")
    await cli("register", str(EXAMPLES / "report.yaml"), *url)
    await cli("trigger", "apply", str(EXAMPLES / "nightly.yaml"), *url)
    port = free_port()
    server = await asyncio.create_subprocess_exec(
        CLI, "server", *url, "--http", f"127.0.0.1:{port}", stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL, env=dict(os.environ))
    worker = await asyncio.create_subprocess_exec(
        CLI, "worker", *url, stdout=asyncio.subprocess.DEVNULL,
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
        yield Stack(base, token)
    finally:
        await _stop(worker)
        await _stop(server)



@pytest.mark.timeout(150)
async def test_the_triggers_page_shows_state_next_runs_history_and_acts(
        trigger_stack: Stack, browser: Browser) -> None:
    page = await log_in(browser, trigger_stack.base, "ada")
    await page.click('nav a:text-is("Triggers")')
    await expect(page).to_have_url(trigger_stack.base + "/triggers")
    row = page.locator('#triggers tr[data-name="nightly"]')
    await expect(row.locator(".state")).to_have_text("active")
    await expect(row.locator("td").nth(2)).to_have_text("cron 0 2 * * * (Europe/Amsterdam)")
    await expect(row.locator("td").nth(3)).to_have_text("examples/triggers/report")
    await expect(row.locator(".next")).not_to_have_text("–")
    await expect(row.locator(".last")).to_have_text("–")

    await row.locator("td a").first.click()
    await expect(page.locator("#trigger-title")).to_have_text(
        "nightly · cron 0 2 * * * (Europe/Amsterdam) → examples/triggers/report")
    await expect(page.locator("#next-runs li")).to_have_count(5)
    await expect(page.locator('#trigger-history tr[data-type="applied"]')).to_have_count(1)

    await row.locator("button.pause").click()
    await expect(row.locator(".state")).to_have_text("paused")
    await expect(row.locator(".next")).to_have_text("–")
    await expect(page.locator("#next-runs")).to_have_text("paused: none until resumed")
    await expect(page.locator('#trigger-history tr[data-type="paused"]')).to_have_count(1)

    await row.locator("button.fire").click()  # a paused trigger fires when asked
    outcome = page.locator("#fire-outcome")
    await expect(outcome).to_have_text(re.compile(r"^nightly started execution \d+\.$"),
                                       timeout=30_000)
    started = await outcome.locator("a").inner_text()
    await expect(outcome.locator("a")).to_have_attribute("href", f"/executions/{started}")
    await expect(page.locator("#triggers-message")).to_have_text("")
    await expect(row.locator(".last .status")).to_have_text("completed", timeout=60_000)
    await expect(row.locator(".last a")).to_have_text(started)
    await expect(page.locator('#trigger-history tr[data-type="fired"]')).to_have_count(1)
    await expect(page.locator('#trigger-history tr[data-type="fire_requested"]')).to_have_count(1)
    execution = await row.locator(".last a").inner_text()
    await expect(page.locator('#trigger-history tr[data-type="fired"] a')).to_have_text(execution)

    await row.locator("button.resume").click()
    await expect(row.locator(".state")).to_have_text("active")
    await expect(page.locator("#next-runs li")).to_have_count(5)
    # newest first: resumed, fired, fire requested, paused, applied
    types = await page.locator("#trigger-history tbody tr").evaluate_all(
        "rows => rows.map(r => r.dataset.type)")
    assert types == ["resumed", "fired", "fire_requested", "paused", "applied"]

    viewer = await log_in(browser, trigger_stack.base, "vic", "/triggers")
    viewer_row = viewer.locator('#triggers tr[data-name="nightly"]')
    await expect(viewer_row.locator(".state")).to_have_text("active")
    await expect(viewer_row.locator(".last a")).to_have_text(execution)
    await expect(viewer_row.locator("button")).to_have_count(0)
    for p in (page, viewer):
        assert getattr(p, "script_errors") == []  # noqa: B009


@pytest.mark.timeout(150)
async def test_a_failed_fire_is_listed_without_a_link_to_an_execution_that_never_started(
        trigger_stack: Stack, browser: Browser, nats_server: NatsServer) -> None:
    url = ["--nats-url", nats_server.url]
    await cli("trigger", "apply", str(EXAMPLES / "big_orders.yaml"), *url)
    # A subject trigger fired by hand has no message for its payload: the fire starts nothing.
    proc = await asyncio.create_subprocess_exec(
        CLI, "trigger", "fire", "big_orders", "--wait", "60", *url,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
    assert await proc.wait() == 1
    page = await log_in(browser, trigger_stack.base, "ada", "/triggers?name=big_orders")
    failed = page.locator('#trigger-history tr[data-type="failed"]')
    await expect(failed).to_have_count(1)
    await expect(failed.locator("td").nth(2)).to_have_text("–")
    await expect(failed.locator("a")).to_have_count(0)

    # Fire now says why the fire started nothing, and links no execution.
    row = page.locator('#triggers tr[data-name="big_orders"]')
    await row.locator("button.fire").click()
    message = page.locator("#triggers-message")
    await expect(message).to_contain_text(
        re.compile(r"trigger big_orders fired for \S+, but no execution started: .*message"),
        timeout=30_000)
    await expect(page.locator("#fire-outcome")).to_have_text("")
    await expect(failed).to_have_count(2)
    # The browser logs the refused fire's answer; nothing else may fail.
    assert getattr(page, "script_errors") == [  # noqa: B009
        "Failed to load resource: the server responded with a status of 409 (Conflict)"]
