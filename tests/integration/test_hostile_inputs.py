"""Playbooks that pass `validate` but produce values nothing can store, or name a pool no worker
serves: each execution ends `failed` with a reason that names what went wrong, never stays
`running` (real nats-server, server and worker)."""

from __future__ import annotations

import textwrap
from typing import Any

import pytest

from noetl_stream import refs
from noetl_stream.bus.connection import Bus
from noetl_stream.dsl import parse_playbook
from noetl_stream.services import submit_and_watch
from noetl_stream.state.results import ResultStore

pytestmark = pytest.mark.integration

HEAD = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: hostile, path: tests/hostile}\n"


async def run(bus: Bus, workflow: str, timeout_s: float = 20) -> dict[str, Any]:
    text = HEAD + textwrap.dedent(workflow)
    parse_playbook(text, "hostile.yaml")  # every case passes validation
    return await submit_and_watch(bus, playbook_text=text, playbook_file="hostile.yaml",
                                  payload={}, on_event=lambda _e: None, timeout_s=timeout_s)


def failure(final: dict[str, Any]) -> str:
    assert final["status"] == "failed", final
    return str((final.get("error") or {}).get("message"))


async def test_set_of_an_integer_beyond_64_bits_fails_the_step(bus: Bus, services: None) -> None:
    final = await run(bus, """\
        workflow:
          - step: start
            tool: {kind: noop}
            set: {ctx.x: "{{ 2**64 }}"}
        """)

    message = failure(final)
    assert "start" in message and "64" in message and "set.x" in message
    assert final["steps"]["start"]["status"] == "failed"


async def test_loop_over_a_billion_items_fails_the_step(bus: Bus, services: None) -> None:
    final = await run(bus, """\
        workflow:
          - step: start
            loop: {in: "{{ range(10**9)|list }}", iterator: i}
            tool: {kind: noop}
        """)

    message = failure(final)
    assert "start" in message and "range" in message


async def test_python_result_nested_too_deep_fails_its_step(bus: Bus, services: None) -> None:
    final = await run(bus, """\
        workflow:
          - step: start
            tool:
              kind: python
              code: |
                v = 1
                for _ in range(251):
                    v = [v]
                result = v
        """)

    message = failure(final)
    assert "start" in message and "nest" in message
    assert final["steps"]["start"]["status"] == "failed"


async def test_python_result_with_a_huge_integer_fails_its_step(bus: Bus, services: None) -> None:
    final = await run(bus, """\
        workflow:
          - step: start
            tool: {kind: python, code: "result = {'n': 2**70}"}
        """)

    message = failure(final)
    assert "start" in message and "64" in message


async def test_loop_results_beyond_the_payload_limit_go_to_the_object_store(
        bus: Bus, services: None) -> None:
    # 40 iterations of 240 kB each: every result is stored inline (under the 256 KiB payload
    # limit), together they are more than a NATS message (8 MiB) may hold.
    final = await run(bus, """\
        workflow:
          - step: start
            loop: {in: "{{ range(40)|list }}", iterator: i}
            tool: {kind: python, code: "result = 'x' * 240000"}
            next: count
          - step: count
            tool:
              kind: python
              input: {rows: "{{ start }}"}
              code: "result = {'n': len(rows), 'size': sum(len(r) for r in rows)}"
        """, timeout_s=120)

    assert final["status"] == "completed", final.get("error")
    assert final["result"] == {"n": 40, "size": 40 * 240_000}
    # The summary, over half a message, carries its steps by reference (state/step_results.py).
    assert refs.ref_of(final["steps"]) is not None
    steps = await ResultStore(bus.js).resolve(final["steps"])
    assert steps["start"]["result"] == ["x" * 240_000] * 40


@pytest.mark.parametrize("pool", ["defualt", "nobody_serves_this"])
async def test_a_pool_no_worker_serves_fails_the_step_at_once(
        bus: Bus, services: None, pool: str) -> None:
    final = await run(bus, f"""\
        workflow:
          - step: start
            pool: {pool}
            tool: {{kind: noop}}
        """, timeout_s=30)

    message = failure(final)
    assert "start" in message and pool in message and "pool" in message
