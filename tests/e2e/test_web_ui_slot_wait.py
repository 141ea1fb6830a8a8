"""An execution that waits for a slot under its playbook's concurrency limit, as the API and a
person in Debian's headless Chromium see it: running, no step started, and saying why; once the
slot is free it says so no more.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from playwright.async_api import Browser, expect
from web_ui import PLAYBOOKS, Stack, log_in, running_stack

from noetl_stream.bus.nats_server import NatsServer
from noetl_stream.testing.waiting import assert_eventually

pytestmark = pytest.mark.e2e


@pytest.fixture
async def stack(nats_server: NatsServer) -> AsyncIterator[Stack]:
    async with running_stack(nats_server.url, [PLAYBOOKS / "slot.yaml"]) as s:
        yield s



async def test_an_execution_waiting_for_a_slot_says_so(stack: Stack, browser: Browser) -> None:
    holder = await stack.start("tests/ui/slot")

    async def holds_the_slot() -> None:
        detail = await stack.call("GET", f"/api/executions/{holder}")
        assert "hold" in detail["steps"] and detail["waiting"] is None, detail

    await assert_eventually(holds_the_slot, timeout_s=30, interval_s=0.2)
    queued = await stack.start("tests/ui/slot")

    async def waits() -> None:
        detail = await stack.call("GET", f"/api/executions/{queued}")
        assert (detail["status"], detail["steps"]) == ("running", {}), detail
        assert detail["waiting"] == {"group": "tests/ui/slot", "key": "", "limit": 1}, detail

    await assert_eventually(waits, timeout_s=30, interval_s=0.2)
    listed = {i["execution_id"]: i for i in (await stack.call("GET", "/api/executions"))["items"]}
    assert (listed[holder]["waiting"], listed[queued]["waiting"]["limit"]) == (None, 1)

    page = await log_in(browser, stack.base, "ada", "/")
    await expect(page.locator(f'tr[data-id="{queued}"] .slot-wait')).to_have_text(
        " waiting for a slot")
    await expect(page.locator(f'tr[data-id="{holder}"] .slot-wait')).to_have_count(0)
    await page.click(f'tr[data-id="{queued}"] a[href="/executions/{queued}"]')
    await expect(page.locator("#exec-status")).to_have_text("running")
    wait = page.locator("#exec-waiting")
    await expect(wait).to_be_visible()
    await expect(wait).to_have_text("waiting for a slot: at most 1 of tests/ui/slot run at once; "
                                    "its first step starts when one ends")
    await expect(page.locator("#waiting")).to_contain_text("waiting for a slot")

    # The holder ends: the queued one takes the slot, starts its steps and says so no more.
    await stack.call("POST", f"/api/executions/{holder}/signals/go", {})
    await expect(wait).to_be_hidden(timeout=30_000)
    await expect(page.locator("#waiting")).not_to_contain_text("waiting for a slot")
    await stack.call("POST", f"/api/executions/{queued}/signals/go", {})
    await expect(page.locator("#exec-status")).to_have_text("completed", timeout=30_000)
