"""The web UI in a real browser (Debian's headless Chromium, driven by Playwright) against a
real nats-server, `server --http` and a worker: log in, run a playbook from the catalog and
watch its steps finish live, open a failed step's error, cancel a running execution, and see
a viewer get no cancel button.

Set NOETL_STREAM_UI_SCREENSHOT=docs/ui-execution.png to keep a picture of the live page.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from playwright.async_api import Browser, Page, expect
from web_ui import (
    CLI,
    PASSWORD,
    PLAYBOOKS,
    Stack,
    _stop,
    cli,
    free_port,
    log_in,
)

from noetl_stream.bus.nats_server import NatsServer
from noetl_stream.testing.waiting import assert_eventually

pytestmark = pytest.mark.e2e

APPROVAL = Path(__file__).resolve().parents[2] / "playbooks" / "examples" / "approval.yaml"


@pytest.fixture
async def stack(nats_server: NatsServer) -> AsyncIterator[Stack]:
    url = ["--nats-url", nats_server.url]
    await cli("init", *url)
    await cli("user", "add", "ada", "--role", "operator", "--password-stdin", *url,
              stdin=PASSWORD.encode() + b"\n")
    await cli("user", "add", "vic", "--role", "viewer", "--password-stdin", *url,
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
            for file in [PLAYBOOKS / f"{n}.yaml" for n in ("steps", "fails", "waits")] + [APPROVAL]:
                text = file.read_text()
                async with http.post(base + "/api/catalog", json={"content": text},
                                     headers={"Authorization": f"Bearer {token}"}) as resp:
                    assert resp.status == 201, await resp.text()
        yield Stack(base, token)
    finally:
        await _stop(worker)
        await _stop(server)



def node(page: Page, step: str, status: str) -> str:
    return f'#net g.node.{status}[data-step="{step}"]'


async def test_the_ui_shows_executions_live_and_acts_on_them(stack: Stack, browser: Browser) -> None:
    page = await log_in(browser, stack.base, "ada")

    # Run from the catalog: the page of the new execution opens and follows it live.
    await page.click('text="Catalog"')
    await page.click('#catalog-paths a:text-is("tests/ui/steps")')
    await expect(page.locator("#playbook-source")).to_contain_text("time.sleep(float(pause))")
    await page.fill("#run-payload", '{"numbers": [1, 2, 3]}')
    await page.click("#run-submit")
    await expect(page).to_have_url(re.compile(r"/executions/\d+$"))
    steps_url = page.url
    await page.wait_for_selector(node(page, "slow", "running"))
    await page.wait_for_selector(node(page, "double", "completed"))
    await expect(page.locator('#net g.node[data-step="double"] .badge')).to_have_text("3/3")
    await expect(page.locator('#net g.node[data-step="merge"] .badge')).to_have_text(re.compile(r"join 1/2"))
    await expect(page.locator("#waiting")).to_contain_text("merge join waits for slow")
    await page.click('#net g.node[data-step="double"]')
    await expect(page.locator("#step-detail .result")).to_contain_text("6")
    shot = os.environ.get("NOETL_STREAM_UI_SCREENSHOT")
    if shot:
        await page.screenshot(path=shot)
    # The same page, never reloaded, sees the rest happen.
    await page.wait_for_selector(node(page, "slow", "completed"))
    await page.wait_for_selector(node(page, "merge", "completed"))
    # What the step printed reads as text, one block per stream, and nothing else is shown.
    await page.click('#net g.node[data-step="slow"]')
    await page.click('#step-detail .tab[data-tab="logs"]')
    printed = page.locator('#step-detail .tab-panel[data-tab="logs"] .captured')
    await expect(printed).to_have_count(2)
    await expect(printed.nth(0).locator("h4")).to_have_text("slow_task stdout")
    await expect(printed.nth(0).locator("pre")).to_have_text("resting for 3 s\n")
    await expect(printed.nth(1).locator("pre")).to_have_text("rested\n")
    await expect(page.locator("#step-detail")).not_to_contain_text("[object")
    await expect(page.locator("#exec-status")).to_have_text("completed")
    await expect(page.locator("#outcome")).to_contain_text('"total": 12')
    await expect(page.locator('#timeline tr[data-type="execution.completed"]')).to_have_count(1)
    assert page.url == steps_url
    await expect(page.locator("#actions")).to_be_hidden()

    # A failed step: its error opens from the step panel.
    async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {stack.token}"}) as http:
        async with http.post(stack.base + "/api/executions", json={"path": "tests/ui/fails"}) as r:
            failed_id = (await r.json())["execution_id"]
        async with http.post(stack.base + "/api/executions", json={"path": "tests/ui/waits"}) as r:
            waiting_id = (await r.json())["execution_id"]
    await page.goto(f"{stack.base}/executions/{failed_id}")
    await page.click(node(page, "load", "failed"))
    await page.click('#step-detail .tab[data-tab="errors"]')  # the tab stays chosen
    error = page.locator("#step-detail details.step-error")
    await expect(error.locator("pre")).to_be_hidden()
    await error.locator("summary").click()
    await expect(error.locator("pre")).to_be_visible()
    await expect(error.locator("pre")).to_contain_text("the warehouse refused the batch")
    await expect(error.locator("summary")).to_contain_text("failed after 2 attempts")
    await expect(page.locator("#step-detail .attempts")).to_contain_text(
        "retry.started attempt 2/2 in 0.10 s: RuntimeError: the warehouse refused the batch")
    await expect(page.locator('#timeline tr[data-type="retry.started"] td').nth(3)).to_have_text(
        "attempt 2/2 in 0.10 s: RuntimeError: the warehouse refused the batch")
    await expect(page.locator("#exec-status")).to_have_text("failed")

    # A viewer may look but not cancel.
    viewer = await log_in(browser, stack.base, "vic", f"/executions/{waiting_id}")
    await viewer.wait_for_selector(node(viewer, "wait", "running"))
    await expect(viewer.locator("#actions")).to_be_hidden()

    # The operator cancels the running one (the button asks once more before it acts).
    await page.goto(f"{stack.base}/executions/{waiting_id}")
    await page.wait_for_selector(node(page, "wait", "running"))
    await page.click("#cancel")
    await expect(page.locator("#cancel")).to_have_text("Really cancel?")
    await page.click("#cancel")
    await expect(page.locator("#exec-status")).to_have_text("cancelled")
    await page.wait_for_selector(node(page, "wait", "cancelled"))
    await expect(page.locator("#outcome")).to_contain_text("cancelled in the web UI by ada")
    await expect(viewer.locator("#exec-status")).to_have_text("cancelled")  # live there too

    # A listener waits for a signal; the signal form sends it and the execution goes on.
    await page.goto(f"{stack.base}/catalog?path=examples/approval")
    await expect(page.locator('#net g.node[data-step="wait_for_approval"]')).to_have_count(1)
    await page.click("#run-submit")
    await expect(page).to_have_url(re.compile(r"/executions/\d+$"))
    approval_id = page.url.rsplit("/", 1)[1]
    await page.wait_for_selector(node(page, "wait_for_approval", "running"))
    await expect(page.locator("#waiting")).to_contain_text("signal.approve")
    await page.fill("#signal-name", "approve")
    await page.fill("#signal-data", '{"user": "ada"}')
    await page.click('#signal-form button[type="submit"]')
    await expect(page.locator("#exec-message")).to_contain_text("signal approve sent")
    await page.wait_for_selector(node(page, "ship", "completed"))
    await expect(page.locator("#exec-status")).to_have_text("completed")
    await expect(page.locator('#timeline tr[data-type="signal.approve"]')).to_have_count(1)
    # Every row is dated: the signal by when the stream stored it, the timer by when it was set.
    signal_at = await page.locator('#timeline tr[data-type="signal.approve"] td').first.inner_text()
    timer = page.locator('#timeline tr[data-type="timer.scheduled"] td')
    assert 0 <= float(signal_at) < 60
    assert 0 <= float(await timer.first.inner_text()) < 60
    await expect(timer.nth(3)).to_have_text("timeout fires in 1 h 0 m")

    # The list: all four with their statuses, and a filter that keeps only the failed one.
    await page.goto(stack.base + "/")
    rows = page.locator("#executions tbody tr")
    await expect(rows).to_have_count(4)
    await expect(page.locator(f'tr[data-id="{approval_id}"] .status')).to_have_text("completed")
    await expect(page.locator(f'tr[data-id="{failed_id}"] .status')).to_have_text("failed")
    await expect(page.locator(f'tr[data-id="{waiting_id}"] .status')).to_have_text("cancelled")
    await page.select_option("#filter-status", "failed")
    await page.click('#filters button[type="submit"]')
    await expect(rows).to_have_count(1)
    await expect(page).to_have_url(stack.base + "/?status=failed")
    await expect(rows.first).to_have_attribute("data-id", failed_id)
    for p in (page, viewer):
        assert getattr(p, "script_errors") == []  # noqa: B009


async def test_run_ui_prints_the_execution_page_and_serves_it_until_interrupted() -> None:
    proc = await asyncio.create_subprocess_exec(
        CLI, "-v", "run", str(PLAYBOOKS / "steps.yaml"), "--ui", "--set", "pause=0",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL, env=dict(os.environ))
    assert proc.stderr is not None and proc.stdout is not None
    try:
        lines: list[str] = []

        async def line_with(text: str) -> str:
            while True:
                line = (await asyncio.wait_for(proc.stderr.readline(), 60)).decode()
                assert line, "run ended early:\n" + "".join(lines)
                lines.append(line)
                if text in line:
                    return line

        page_url = (await line_with("execution page: ")).split("execution page: ")[1].strip()
        found = re.fullmatch(r"(http://127\.0\.0\.1:\d+)/executions/(\d+)#token=(\S+)", page_url)
        assert found, page_url
        await line_with("the UI stays at")
        base, execution_id, token = found.groups()
        # The port it listens on, not the 0 it asked for; no warning about an API without
        # authentication, which this run never serves.
        assert not base.endswith(":0")
        assert not [line for line in lines if "no-auth" in line or "AUTHENTICATION" in line]
        async with aiohttp.ClientSession() as http:
            async with http.get(page_url) as resp:
                assert resp.status == 200 and resp.content_type == "text/html"
            # The embedded stack is this process's own: its API asks for the run's token only.
            async with http.get(f"{base}/api/executions/{execution_id}",
                                headers={"Authorization": f"Bearer {token}"}) as resp:
                assert resp.status == 200
                assert (await resp.json())["status"] == "completed"
        proc.send_signal(signal.SIGINT)
        out = await asyncio.wait_for(proc.stdout.read(), 30)
        assert await asyncio.wait_for(proc.wait(), 30) == 0
        assert '"total": 12' in out.decode()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
