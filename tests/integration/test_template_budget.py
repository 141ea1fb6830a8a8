"""A step whose `set:` holds ten heavy templates (each a thousand `groupby`s of 20,000 rows, about
200 CPU-seconds together without a budget) fails with the budget named, and a trivial execution
started while the router renders them completes within seconds (real nats-server, server and
worker)."""

from __future__ import annotations

import asyncio
import logging
import textwrap
import time
from typing import Any

import pytest

from noetl_stream.bus.connection import Bus
from noetl_stream.services import submit_and_watch

pytestmark = pytest.mark.integration

HEAD = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: budget, path: tests/budget}\n"
GROUPS = "{% for i in range(1000) %}{{ workload.rows | groupby('k') | length }}{% endfor %}"
HEAVY = HEAD + "workflow:\n  - step: start\n    tool: {kind: noop}\n    set:\n" + "".join(
    f'      ctx.g{n}: "{GROUPS}"\n' for n in range(10))
TRIVIAL = HEAD + textwrap.dedent("""\
    workflow:
      - step: start
        tool: {kind: noop}
        set: {ctx.x: "{{ 1 + 1 }}"}
    """)


async def test_a_heavy_template_fails_its_step_and_stalls_no_other_execution(
        bus: Bus, services: None) -> None:
    step_done = asyncio.Event()

    def heard(event: dict[str, Any]) -> None:
        if event.get("event_type") == "step.done":
            step_done.set()  # the router renders the step's `set:` from here on

    rows = [{"k": i % 7, "v": i} for i in range(20_000)]
    heavy = asyncio.create_task(submit_and_watch(
        bus, playbook_text=HEAVY, playbook_file="heavy.yaml", payload={"rows": rows},
        on_event=heard, timeout_s=120))
    await asyncio.wait_for(step_done.wait(), 30)
    started = time.monotonic()
    trivial = await submit_and_watch(bus, playbook_text=TRIVIAL, playbook_file="trivial.yaml",
                                     payload={}, on_event=lambda _e: None, timeout_s=60)
    trivial_s = time.monotonic() - started
    final = await heavy

    assert trivial["status"] == "completed", trivial
    assert trivial_s < 3, f"a trivial execution took {trivial_s:.1f} s beside a heavy template"
    assert final["status"] == "failed", final
    message = str((final.get("error") or {}).get("message"))
    assert "budget" in message and "start" in message and "set.g" in message, message
    assert final["steps"]["start"]["status"] == "failed"


# The start step's loop collection renders when the execution starts: about 200,000 operations,
# past the server's own allowance and within the budget, so the start is made in the render pool.
LONG_START = HEAD + textwrap.dedent("""\
    workflow:
      - step: start
        loop:
          in: "{{ (workload.rows | groupby('k') | map(attribute='grouper') | list) * 3 }}"
          iterator: k
          spec: {mode: parallel}
        tool: {kind: noop}
    """)


# A start step whose loop collection renders about 3,000 operations: past what the server spends
# on its event loop, within the thread's allowance, so it is made in the thread (no render pool).
MEDIUM_START = HEAD + textwrap.dedent("""\
    workflow:
      - step: start
        loop:
          in: "{{ range(1000) | list }}"
          iterator: i
          spec: {mode: parallel}
        tool: {kind: noop}
    """)


@pytest.mark.parametrize(("text", "rows", "in_pool"), [
    pytest.param(LONG_START, 20_000, True, id="made-in-the-render-pool"),
    pytest.param(MEDIUM_START, 0, False, id="past-the-loop-allowance-made-in-the-thread"),
])
async def test_a_start_is_made_where_its_templates_render_length_puts_it(
        bus: Bus, services: None, caplog: pytest.LogCaptureFixture, text: str, rows: int,
        in_pool: bool) -> None:
    caplog.set_level(logging.INFO, logger="noetl_stream.server")
    payload = {"rows": [{"k": i % 7, "v": i} for i in range(rows)]} if rows else {}
    final = await submit_and_watch(bus, playbook_text=text, playbook_file="start.yaml",
                                   payload=payload, on_event=lambda _e: None, timeout_s=60)
    assert final["status"] == "completed", final.get("error")
    assert final["steps"]["start"]["status"] == "completed", final["steps"]["start"]
    assert ("long template renders run in a pool" in caplog.text) is in_pool
