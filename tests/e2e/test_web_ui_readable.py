"""What a person reads on the execution page and the list, in Debian's headless Chromium against
a real nats-server, `server --http` and a worker: a step waiting on a timer an hour away is drawn
for as long as it has waited (its `timer.scheduled` event is dated by when the timer fires), a
python error's traceback reads as lines, and a long error stays short in the list with the whole
of it in the tooltip; an unknown execution is one message, not empty cards around it; the
playbook link of an execution run from a file says the playbook is not registered."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import pytest
from playwright.async_api import Browser, expect
from web_ui import PLAYBOOKS, Stack, log_in, running_stack

from noetl_stream.bus.nats_server import NatsServer

pytestmark = pytest.mark.e2e


@pytest.fixture
async def stack(nats_server: NatsServer) -> AsyncIterator[Stack]:
    async with running_stack(nats_server.url, [PLAYBOOKS / "listens.yaml",
                                               PLAYBOOKS / "long_error.yaml"]) as s:
        yield s


async def test_a_step_waiting_on_a_timer_is_drawn_for_the_time_it_has_waited(
        stack: Stack, browser: Browser) -> None:
    execution_id = await stack.start("tests/ui/listens")
    page = await log_in(browser, stack.base, "ada", f"/executions/{execution_id}")
    await expect(page.locator("#gantt .gantt-row[data-step='wait']")).to_have_count(1)
    await expect(page.locator("#timeline")).to_contain_text("timer.scheduled")
    # Seconds so far, not the hour until the timer fires.
    took = page.locator("#gantt .gantt-row[data-step='wait'] .gantt-dur")
    await expect(took).to_have_text(re.compile(r"^[\d.]+ m?s…$"))
    ticks = await page.locator("#gantt .gantt-tick").all_inner_texts()
    assert not any(" h" in t or " m " in t for t in ticks), ticks
    # How long it has waited reads as a span ("for 3.2 s so far"), not as a time ("since 3.2 s").
    waited = re.compile(r"\(run 1\) waits for .+ for [\d.]+ m?s so far")
    await expect(page.locator("#waiting")).to_contain_text(waited)
    assert page.script_errors == []  # type: ignore[attr-defined]


async def test_a_python_error_reads_as_lines_and_stays_short_in_the_list(
        stack: Stack, browser: Browser) -> None:
    execution_id = await stack.start("tests/ui/long_error")
    page = await log_in(browser, stack.base, "ada", f"/executions/{execution_id}")
    await expect(page.locator("#exec-status")).to_have_text("failed")
    error = page.locator("#outcome details.step-error")
    await expect(error.locator(".traceback")).to_contain_text("Traceback (most recent call last):")
    trace = await error.locator(".traceback").inner_text()
    assert "\n" in trace and "\\n" not in trace, trace
    assert trace.rstrip().splitlines()[-1].startswith("RuntimeError: upstream said:"), trace
    assert '"traceback"' not in await error.locator("pre").inner_text()
    # The step's code on the Input tab reads as code, not as a JSON string.
    await page.click('#net g.node[data-step="load"]')
    await page.click('#step-detail .tab[data-tab="input"]')
    code = page.locator('#step-detail .tab-panel[data-tab="input"] pre.config-text[data-field="code"]')
    await expect(code).to_have_text(
        'raise RuntimeError("upstream said: " + "a very long reason that goes on and on " * 20)\n')

    await page.goto(stack.base + "/")
    cell = page.locator(f'tr[data-id="{execution_id}"] td.error')
    await expect(cell).to_contain_text("upstream said: a very long reason")
    shown = await cell.inner_text()
    whole = await cell.get_attribute("title")
    assert len(shown) <= 240 and shown.endswith("…"), shown
    assert whole is not None and whole.startswith(shown[:-1]) and len(whole) > len(shown), whole
    assert page.script_errors == []  # type: ignore[attr-defined]


async def test_an_unknown_execution_is_said_once_without_empty_cards(
        stack: Stack, browser: Browser) -> None:
    page = await log_in(browser, stack.base, "ada", "/")
    await page.goto(stack.base + "/executions/4242424242")
    await expect(page.locator("#exec-message")).to_have_text('execution "4242424242" not found')
    await expect(page.locator(".execution > .grid")).to_be_hidden()
    await expect(page.locator("#timeline")).to_be_hidden()
    await expect(page.locator("#recovery-message")).to_have_text("")
    assert await page.get_by_text("not found").count() == 1


async def test_the_playbook_link_of_an_execution_run_from_a_file_says_it_is_not_registered(
        stack: Stack, browser: Browser) -> None:
    text = (PLAYBOOKS / "long_error.yaml").read_text().replace("tests/ui/long_error", "tests/ui/file")
    execution_id = (await stack.call("POST", "/api/executions", {"playbook": text}))["execution_id"]
    page = await log_in(browser, stack.base, "ada", f"/executions/{execution_id}")
    await page.click('#exec-facts a:text-is("tests/ui/file")')
    await expect(page.locator("#catalog-message")).to_have_text(
        "tests/ui/file is not registered: a playbook run from a file is in the catalog once "
        "`noetl-stream register FILE` adds it.")
