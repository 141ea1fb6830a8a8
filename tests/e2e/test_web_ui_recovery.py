"""Recovery on an execution's page in a real browser (headless Chromium, Playwright), against a
real nats-server, `server --http` and a worker: an execution cancelled while a step naps shows a
Restart button; restarting it from where it stopped reruns that step and the page follows it to
completed; the timeline scrubber then steps through its events, showing the net's marking after
each one as a person reads it (the event, the execution's status, every step's status)."""

from __future__ import annotations

import aiohttp
import pytest
from playwright.async_api import Browser, expect
from test_web_ui import PLAYBOOKS, Stack, log_in, node, stack  # noqa: F401 - fixtures

from noetl_stream.testing.waiting import assert_eventually

pytestmark = pytest.mark.e2e


async def test_a_cancelled_execution_restarts_from_its_page_and_its_marking_replays(
        stack: Stack, browser: Browser) -> None:  # noqa: F811 - test_web_ui's fixtures
    auth = {"Authorization": f"Bearer {stack.token}"}
    async with aiohttp.ClientSession(headers=auth) as http:
        async with http.post(stack.base + "/api/executions",
                             json={"playbook": (PLAYBOOKS / "recover.yaml").read_text()}) as r:
            assert r.status == 202, await r.text()
            execution_id = (await r.json())["execution_id"]

        async def napping() -> None:
            async with http.get(f"{stack.base}/api/executions/{execution_id}") as r:
                assert (await r.json())["steps"].get("nap", {}).get("status") == "running"
        await assert_eventually(napping, timeout_s=30, interval_s=0.2)
        async with http.post(f"{stack.base}/api/executions/{execution_id}/cancel",
                             json={"reason": "to restart it"}) as r:
            assert r.status == 202

    page = await log_in(browser, stack.base, "ada", f"/executions/{execution_id}")
    await expect(page.locator("#exec-status")).to_have_text("cancelled")
    await expect(page.locator("#restart")).to_have_text("Restart")
    await expect(page.locator("#restart-from option")).to_have_text(
        ["where it stopped", "from start", "from nap"])
    await page.click("#restart")
    await expect(page.locator("#restart-message")).to_contain_text("Restart 1 requested")
    # The page reloads and follows the restart to its end.
    await expect(page.locator("#exec-status")).to_have_text("completed", timeout=60_000)
    await page.wait_for_selector(node(page, "finish", "completed"))
    await expect(page.locator("#restart")).to_have_count(0)

    label = page.locator("#scrub-label")
    await expect(label).to_contain_text(": step.done finish · +")
    await expect(label).to_contain_text("— execution completed")
    await page.locator("#scrub").focus()
    await page.keyboard.press("Home")
    await expect(label).to_contain_text("Event 1 of ")
    await expect(label).to_contain_text(": execution.started · +0 ms — execution running")
    await expect(page.locator("#scrub-steps li")).to_have_text(["start running (running)"])
    await expect(page.locator('#scrub-net g.node.running[data-step="start"]')).to_have_count(1)
    # Forward, event by event, until the cancellation: the nap was running, then cancelled.
    for _ in range(40):
        if "execution cancelled" in (await label.text_content() or ""):
            break
        await page.click("#scrub-next")
    await expect(label).to_contain_text(": execution.cancel.requested · +")
    await expect(label).to_contain_text("— execution cancelled")
    await expect(page.locator("#scrub-steps")).to_contain_text("nap cancelled")
    await expect(page.locator("#scrub-steps")).to_contain_text("start completed")
    await page.click("#scrub-next")
    await expect(label).to_contain_text("execution.restart.requested")
    await expect(label).to_contain_text("— execution running")
    await expect(page.locator("#scrub-steps")).to_contain_text("nap running (running)")
    assert getattr(page, "script_errors") == []  # noqa: B009


async def test_the_marking_replays_while_the_execution_runs_and_follows_its_latest_event(
        stack: Stack, browser: Browser) -> None:  # noqa: F811 - test_web_ui's fixtures
    auth = {"Authorization": f"Bearer {stack.token}"}
    async with aiohttp.ClientSession(headers=auth) as http:
        async with http.post(stack.base + "/api/executions",
                             json={"playbook": (PLAYBOOKS / "held.yaml").read_text()}) as r:
            assert r.status == 202, await r.text()
            execution_id = (await r.json())["execution_id"]

        async def holding() -> None:
            async with http.get(f"{stack.base}/api/executions/{execution_id}") as r:
                assert "hold" in (await r.json())["steps"]
        await assert_eventually(holding, timeout_s=30, interval_s=0.2)

        page = await log_in(browser, stack.base, "ada", f"/executions/{execution_id}")
        await expect(page.locator("#exec-status")).to_have_text("running")
        await expect(page.locator("#scrubber-card")).to_be_visible()
        label = page.locator("#scrub-label")
        await expect(label).to_contain_text("— execution running")
        await expect(page.locator("#scrub-steps")).to_contain_text("start completed")
        await expect(page.locator("#scrub-steps")).to_contain_text("hold")
        await page.locator("#scrub").focus()
        await page.keyboard.press("Home")
        await expect(label).to_contain_text("Event 1 of ")
        await expect(label).to_contain_text(": execution.started · +0 ms — execution running")
        await page.keyboard.press("End")
        # At the latest event, the scrubber follows the execution to its end.
        async with http.post(f"{stack.base}/api/executions/{execution_id}/signals/go",
                             json={"by": "ada"}) as r:
            assert r.status == 202, await r.text()
    await expect(page.locator("#exec-status")).to_have_text("completed", timeout=30_000)
    await expect(label).to_contain_text("— execution completed", timeout=10_000)
    await expect(page.locator("#scrub-steps")).to_contain_text("hold completed")
    assert getattr(page, "script_errors") == []  # noqa: B009
