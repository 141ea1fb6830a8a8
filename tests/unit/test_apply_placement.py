"""Where the server applies a group of events (server/render_pool.py): on the event loop while
its renders stay within LOOP_OPERATIONS, else again from the committed state in a thread within
INLINE_OPERATIONS, else in the render pool; each place gives the state a direct apply gives."""

from __future__ import annotations

import threading
from typing import cast

import pytest
from nats.aio.msg import Msg

from noetl_stream import jsonutil, router
from noetl_stream.dsl.parser import parse_playbook
from noetl_stream.router.state import ExecutionState
from noetl_stream.router_events import RouterEvent, router_event
from noetl_stream.server import render_pool
from noetl_stream.server.render_pool import RenderPool, apply_where_it_fits
from noetl_stream.server.versions import Cached
from noetl_stream.testing.router_harness import RouterHarness, outcome_event

Items = list[tuple[Msg, RouterEvent]]


def guarded(items: int) -> str:
    """s1 -> s2 through a guard that hands `items` range items to a filter and back: about three
    template operations per item (dsl/template_budget.py)."""
    guard = f"{{{{ range({items}) | list | length > 0 }}}}" if items else "{{ true }}"
    return ("apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: placement}\nworkflow:\n"
            f"  - step: s1\n    tool: {{kind: noop}}\n"
            f"    next: {{arcs: [{{step: s2, when: \"{guard}\"}}]}}\n"
            "  - step: s2\n    tool: {kind: noop}\n")


class Committed:
    """An execution whose first step is done: the state as committed, read anew on each reload."""

    def __init__(self, items: int) -> None:
        self.playbook = parse_playbook(guarded(items)).playbook
        started = RouterHarness(self.playbook)
        self.committed = started.state.to_json()
        event = outcome_event(started.pending[0])
        self.items: Items = [(cast(Msg, None), router_event(event))]
        self.reloads = 0

    def cached(self) -> Cached:
        return Cached(ExecutionState.from_dict(jsonutil.loads(self.committed)), 1, self.playbook)

    async def reload(self, items: Items) -> tuple[Cached, Items] | None:
        self.reloads += 1
        return self.cached(), items

    def expected(self) -> bytes:
        state = self.cached().state
        router.apply(self.playbook, state, self.items[0][1], 1.0)
        return state.to_json()


async def place(run: Committed, pool: RenderPool) -> render_pool.Placed:
    placed = await apply_where_it_fits(run.cached(), run.items, 1.0, run.reload, pool)
    assert placed is not None and placed.applied
    assert placed.cached.state.to_json() == run.expected()
    assert placed.cached.state.steps["s2"].status == "running"  # the guard let s2 start
    return placed


def observe_applies(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The threads `router.apply` runs on, in order (the expected state's apply included)."""
    applying, original = [], router.apply

    def observed(*args: object, **kwargs: object) -> object:
        applying.append(threading.get_ident())
        return original(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(router, "apply", observed)
    return applying


@pytest.mark.parametrize("items", [0, 200])
async def test_a_light_apply_stays_on_the_event_loop(
        items: int, monkeypatch: pytest.MonkeyPatch) -> None:
    run, applying = Committed(items), observe_applies(monkeypatch)
    await place(run, RenderPool())
    assert run.reloads == 0
    assert applying and set(applying) == {threading.get_ident()}  # no thread took it


async def test_an_apply_past_the_loop_allowance_is_done_again_in_the_thread(
        monkeypatch: pytest.MonkeyPatch) -> None:
    run, pool = Committed(render_pool.LOOP_OPERATIONS // 2), RenderPool()
    applying = observe_applies(monkeypatch)
    placed = await place(run, pool)
    assert run.reloads == 1
    assert placed.vars_before == {}
    here = threading.get_ident()
    assert applying[0] == here and applying[1] != here  # on the loop, then again in a thread
    await pool.stop()


@pytest.mark.timeout(120)
async def test_an_apply_past_the_thread_allowance_is_done_again_in_the_pool() -> None:
    run, pool = Committed(render_pool.INLINE_OPERATIONS // 2), RenderPool()
    try:
        await place(run, pool)
    finally:
        await pool.stop()
    assert run.reloads == 2
