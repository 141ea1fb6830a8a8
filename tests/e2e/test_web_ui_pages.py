"""The execution page and the executions list as a person reads them, in Debian's headless
Chromium against a real nats-server, `server --http`, a worker and a local HTTP service: the
steps on a time axis with a 23-item loop folded under its step, a step's tabs (input, output,
logs, errors with each attempt of a retried 404 as it happens), links between a parent and
its child execution, and the list's errors, labels, counts, searches and bulk cancel.

With NOETL_STREAM_SCREENSHOTS=DIR the pages are pictured there (`make screenshots`).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest
from playwright.async_api import Browser, Page, expect
from web_ui import PLAYBOOKS, Stack, log_in, running_stack, shot

from local_http import HttpService
from noetl_stream.bus.nats_server import NatsServer

pytestmark = pytest.mark.e2e

NAMES = ("steps", "fails", "waits", "held", "loop", "fetch", "parent", "child")


@pytest.fixture
async def stack(nats_server: NatsServer) -> AsyncIterator[Stack]:
    async with running_stack(nats_server.url, [PLAYBOOKS / f"{n}.yaml" for n in NAMES]) as s:
        yield s



async def tab(page: Page, name: str) -> None:
    await page.click(f'#step-detail .tab[data-tab="{name}"]')
    await expect(page.locator(f'#step-detail .tab-panel[data-tab="{name}"]')).to_be_visible()


def panel(page: Page, name: str) -> str:
    return f'#step-detail .tab-panel[data-tab="{name}"]'


async def test_a_loop_is_one_row_of_the_timeline_until_opened(stack: Stack, browser: Browser) -> None:
    loop_id = await stack.start("tests/ui/loop", labels={"team": "data"})
    page = await log_in(browser, stack.base, "ada", f"/executions/{loop_id}")
    await expect(page.locator("#exec-status")).to_have_text("completed")
    await expect(page.locator("#exec-labels a")).to_have_text(["team=data"])
    gantt = page.locator("#gantt")
    rows = gantt.locator(".gantt-row[data-step]")
    # One row per step, in the order they started: the 23 iterations are folded into `each`.
    await expect(rows).to_have_count(3)
    assert await rows.evaluate_all("rs => rs.map(r => r.dataset.step)") == ["start", "each", "total"]
    each = gantt.locator('.gantt-row[data-step="each"]')
    await expect(each.locator(".gantt-count")).to_have_text(" 23 iterations")
    await expect(each.locator(".gantt-bar.completed")).to_have_count(1)
    await expect(gantt.locator(".gantt-row.iteration")).to_have_count(0)
    # Bars sit on one time axis: `total` starts once `each` has ended.
    each_box = await each.locator(".gantt-bar").bounding_box()
    total_box = await gantt.locator('.gantt-row[data-step="total"] .gantt-bar').bounding_box()
    assert each_box and total_box
    assert total_box["x"] >= each_box["x"] + each_box["width"] - 2
    await expect(each.locator(".gantt-dur")).to_have_text(re.compile(r"^\d+(\.\d+)? (ms|s)$"))
    # Opened, the loop lists its iterations under it; closed again, they are gone.
    await each.locator(".gantt-toggle").click()
    iterations = gantt.locator('.gantt-iterations[data-step="each"] .gantt-row.iteration')
    await expect(iterations).to_have_count(23)
    await expect(iterations.nth(22).locator(".gantt-label")).to_have_text("#22")
    await expect(iterations.locator(".gantt-bar.completed")).to_have_count(23)
    # The step's tabs: what each iteration ran on, printed, and returned.
    await each.locator("a.gantt-step").click()
    await expect(page.locator("#step-name")).to_have_text("each")
    await expect(page.locator(f'{panel(page, "output")} pre.result')).to_contain_text("484")
    await tab(page, "input")
    inputs = page.locator(f'{panel(page, "input")} .task-input')
    await expect(inputs).to_have_count(23)
    await expect(page.locator(panel(page, "input"))).to_contain_text('"label": "item 22"')
    await expect(page.locator(panel(page, "input"))).to_contain_text("handling {label}")  # the code
    await shot(page, "ui-execution.png", height=1500)
    await tab(page, "logs")
    await expect(page.locator(f'{panel(page, "logs")} pre').filter(has_text="handling item 5")
                 ).to_have_text("handling item 5\n")
    await tab(page, "errors")
    await expect(page.locator(panel(page, "errors"))).to_have_text("No error, no retry.")
    await each.locator(".gantt-toggle").click()
    await expect(iterations).to_have_count(0)
    # Every row of the event timeline is dated.
    stamps = await page.locator("#timeline tbody tr td:first-child").all_inner_texts()
    assert stamps and all(re.fullmatch(r"\d+\.\d\d", s) for s in stamps), stamps
    assert getattr(page, "script_errors") == []  # noqa: B009


async def test_each_attempt_of_a_retried_404_shows_as_it_happens(
        stack: Stack, browser: Browser, http_service: HttpService) -> None:
    page = await log_in(browser, stack.base, "ada")
    fetch_id = await stack.start("tests/ui/fetch", {"base": http_service.url, "key": "ui-orders"})
    await page.goto(f"{stack.base}/executions/{fetch_id}")
    await page.click('#net g.node[data-step="fetch"]')
    await tab(page, "errors")
    attempts = page.locator(f'{panel(page, "errors")} ul.attempts li[data-type="retry.started"]')
    # The first retry is announced while the step still runs: no waiting for the outcome.
    await expect(attempts.first).to_contain_text("attempt 2/5 in 2.00 s: HTTP 404")
    assert await page.locator("#exec-status").inner_text() == "running"
    await expect(page.locator('#step-detail .tab[data-tab="errors"] .tab-count')).not_to_have_text("")
    await expect(attempts).to_have_count(3)
    await expect(attempts.nth(2)).to_contain_text("attempt 4/5")
    await expect(page.locator("#exec-status")).to_have_text("completed")
    await tab(page, "input")
    await expect(page.locator(panel(page, "input"))).to_contain_text(
        f"{http_service.url}/status/404/ui-orders")
    assert http_service.calls["ui-orders"] == 4  # three 404s, then the 200


async def test_parent_and_child_executions_link_to_each_other(stack: Stack, browser: Browser) -> None:
    parent_id = await stack.start("tests/ui/parent")
    page = await log_in(browser, stack.base, "ada", f"/executions/{parent_id}")
    await expect(page.locator("#exec-status")).to_have_text("completed")
    child_link = page.locator("#exec-children a")
    await expect(child_link).to_have_count(1)
    child_id = await child_link.inner_text()
    assert child_id != parent_id
    await page.click('#net g.node[data-step="start"]')
    await expect(page.locator("#step-detail .children a")).to_have_text(child_id)
    await child_link.click()
    await expect(page).to_have_url(f"{stack.base}/executions/{child_id}")
    await expect(page.locator("#exec-title")).to_contain_text("tests/ui/child")
    await expect(page.locator("#exec-parent")).to_have_text(parent_id)
    await page.click('#net g.node[data-step="start"]')
    await tab(page, "input")
    await expect(page.locator(panel(page, "input"))).to_contain_text('"n": 7')
    await page.click("#exec-parent")
    await expect(page).to_have_url(f"{stack.base}/executions/{parent_id}")


async def test_a_person_finds_executions_and_acts_on_them_from_the_list(
        stack: Stack, browser: Browser) -> None:
    before = datetime.now(UTC) - timedelta(seconds=5)
    failed_id = await stack.start("tests/ui/fails", labels={"team": "data"})
    done_id = await stack.start("tests/ui/steps", {"pause": 0}, labels={"team": "web", "env": "dev"})
    waits = [await stack.start("tests/ui/held", labels={"team": "data"}) for _ in range(3)]
    page = await log_in(browser, stack.base, "ada", "/", picture="ui-login.png")
    rows = page.locator("#executions tbody tr")
    await expect(rows).to_have_count(5)
    await expect(page.locator(f'tr[data-id="{failed_id}"] .status')).to_have_text("failed")
    await expect(page.locator(f'tr[data-id="{done_id}"] .status')).to_have_text("completed")
    for w in waits:
        await expect(page.locator(f'tr[data-id="{w}"] .status')).to_have_text("running")
    # The failure's reason is in its row; labels are shown; counts per status above.
    await expect(page.locator(f'tr[data-id="{failed_id}"] td.error')).to_contain_text(
        "the warehouse refused the batch")
    await expect(page.locator(f'tr[data-id="{done_id}"] td.error')).to_have_text("")
    await expect(page.locator(f'tr[data-id="{done_id}"] .labels a')).to_have_text(
        ["team=web", "env=dev"])
    counts = page.locator("#counts")
    await expect(counts.locator('a[data-status="running"] .count')).to_have_text("3")
    await expect(counts.locator('a[data-status="failed"] .count')).to_have_text("1")
    await expect(counts.locator('a[data-status="any"] .count')).to_have_text("5")
    await shot(page, "ui-list.png")

    # Search by playbook text, by id, by label, by status and by time range.
    await page.fill("#filter-path", "HELD")
    await page.click('#filters button[type="submit"]')
    await expect(rows).to_have_count(3)
    await expect(counts.locator('a[data-status="any"] .count')).to_have_text("3")
    await page.click("#filter-clear")
    await expect(rows).to_have_count(5)
    await page.fill("#filter-id", done_id[-8:])
    await page.click('#filters button[type="submit"]')
    await expect(rows).to_have_count(1)
    await expect(rows.first).to_have_attribute("data-id", done_id)
    await page.click("#filter-clear")
    await page.click(f'tr[data-id="{done_id}"] .labels a:text-is("team=web")')
    await expect(rows).to_have_count(1)
    await expect(page).to_have_url(stack.base + "/?label=team%3Dweb")
    await expect(counts.locator('a[data-status="running"] .count')).to_have_text("0")
    await page.click('#counts a[data-status="completed"]')
    await expect(page).to_have_url(stack.base + "/?label=team%3Dweb&status=completed")
    await expect(rows).to_have_count(1)
    await page.click("#filter-clear")
    await page.click('#counts a[data-status="running"]')
    await expect(rows).to_have_count(3)
    await page.click("#filter-clear")
    later = (datetime.now(UTC) + timedelta(hours=1)).astimezone()
    await page.fill("#filter-since", later.strftime("%Y-%m-%dT%H:%M"))
    await page.click('#filters button[type="submit"]')
    await expect(rows).to_have_count(1)
    await expect(rows.first).to_contain_text("No executions match.")
    await page.fill("#filter-since", before.astimezone().strftime("%Y-%m-%dT%H:%M"))
    await page.fill("#filter-until", later.strftime("%Y-%m-%dT%H:%M"))
    await page.click('#filters button[type="submit"]')
    await expect(rows).to_have_count(5)
    await page.click("#filter-clear")

    # Bulk cancel: two of the three running ones, ticked; the button asks once more.
    await page.check(f'tr[data-id="{waits[0]}"] input.pick')
    await page.check(f'tr[data-id="{waits[1]}"] input.pick')
    await expect(page.locator(f'tr[data-id="{failed_id}"] input.pick')).to_have_count(0)
    await expect(page.locator("#cancel-selected")).to_have_text("Cancel selected (2)")
    await page.click("#cancel-selected")
    await expect(page.locator("#cancel-selected")).to_have_text("Really cancel 2?")
    await page.click("#cancel-selected")
    await expect(page.locator("#bulk-note")).to_have_text("cancel requested for 2 of 2")
    for w in waits[:2]:
        await expect(page.locator(f'tr[data-id="{w}"] .status')).to_have_text("cancelled")
        await expect(page.locator(f'tr[data-id="{w}"] td.error')).to_contain_text(
            "cancelled in the web UI by ada")
    await expect(page.locator(f'tr[data-id="{waits[2]}"] .status')).to_have_text("running")

    # Open one from the list and read its tabs; the step's error opens under Errors.
    await page.click(f'tr[data-id="{failed_id}"] a:text-is("{failed_id}")')
    await expect(page).to_have_url(f"{stack.base}/executions/{failed_id}")
    await page.click('#net g.node.failed[data-step="load"]')
    await tab(page, "errors")
    await page.click(f'{panel(page, "errors")} details.step-error summary')
    await expect(page.locator(f'{panel(page, "errors")} details.step-error pre')).to_contain_text(
        "the warehouse refused the batch")
    await expect(page.locator(f'{panel(page, "errors")} ul.attempts')).to_contain_text(
        "attempt 2/2 in 0.10 s: RuntimeError: the warehouse refused the batch")
    await shot(page, "ui-step-tabs.png", height=900)
    await tab(page, "input")
    await expect(page.locator(panel(page, "input"))).to_contain_text("the warehouse refused")
    await tab(page, "events")
    await expect(page.locator(f'{panel(page, "events")} .step-events')).to_contain_text("step.failed")

    # Back to the list, into the last running one: the signal it waits for lets it finish.
    await page.click('header nav a[data-nav="executions"]')
    await page.click(f'tr[data-id="{waits[2]}"] a:text-is("{waits[2]}")')
    await page.wait_for_selector('#net g.node.running[data-step="hold"]')
    await page.fill("#signal-name", "go")
    await page.fill("#signal-data", '{"by": "ada"}')
    await page.click('#signal-form button[type="submit"]')
    await expect(page.locator("#exec-message")).to_contain_text("signal go sent")
    await expect(page.locator("#exec-status")).to_have_text("completed")
    await expect(page.locator('#timeline tr[data-type="signal.go"] td').first).to_have_text(
        re.compile(r"^\d+\.\d\d$"))
    await page.click('#net g.node[data-step="hold"]')
    await expect(page.locator(f'{panel(page, "output")} pre.result')).to_contain_text('"by": "ada"')

    # Another one, cancelled from its own page.
    held = await stack.start("tests/ui/held")
    await page.click('header nav a[data-nav="executions"]')
    await page.click(f'tr[data-id="{held}"] a:text-is("{held}")')
    await page.wait_for_selector('#net g.node.running[data-step="hold"]')
    # Its bar runs to now while it waits, and says so; cancelled, it ends in that colour.
    hold = page.locator('#gantt .gantt-row[data-step="hold"]')
    await expect(hold.locator(".gantt-bar.running")).to_have_count(1)
    await expect(hold.locator(".gantt-dur")).to_have_text(re.compile(r"…$"))
    await page.click("#cancel")
    await page.click("#cancel")
    await expect(page.locator("#exec-status")).to_have_text("cancelled")
    await expect(hold.locator(".gantt-bar.cancelled")).to_have_count(1)
    await expect(hold.locator(".gantt-dur")).not_to_have_text(re.compile(r"…$"))
    assert getattr(page, "script_errors") == []  # noqa: B009


async def test_the_login_form_never_sends_a_password_in_the_address(
        stack: Stack, browser: Browser) -> None:
    # The page without its script, as a browser has it before login.js has run (or when it
    # fails to load): a click or Enter must not submit the form natively, which would put the
    # password in the address (history, access logs, Referer).
    context = await browser.new_context()
    page = await context.new_page()
    await page.route("**/ui/login.js", lambda route: route.abort())
    await page.goto(stack.base + "/login")
    await expect(page.locator("#login-submit")).to_be_disabled()
    await page.fill("#login-user", "ada")
    await page.fill("#login-password", "a-secret-password")
    await page.press("#login-password", "Enter")
    await page.locator("#login-submit").click(force=True)
    await page.wait_for_timeout(300)
    assert "a-secret-password" not in page.url
    await expect(page.locator("#login-user")).to_have_value("ada")
    # With its script the button works, and the password goes in the POST body of the API call.
    page = await log_in(browser, stack.base, "ada", "/")
    assert "password" not in page.url
    await context.close()
