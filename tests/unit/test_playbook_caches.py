"""The server's parsed playbooks and the router's graphs: one size, so every playbook in use
keeps its graph (no rebuild per event past a few hundred playbooks), and a playbook is parsed
off the event loop.
"""

from __future__ import annotations

import asyncio
import time

from unit_helpers import HEADER

from noetl_stream.dsl import parse_playbook
from noetl_stream.router import graph
from noetl_stream.runtime import server
from noetl_stream.runtime.playbook_parsing import parse_off_loop


def test_a_graph_is_kept_for_as_many_playbooks_as_the_server_keeps() -> None:
    assert server.PLAYBOOK_CACHE_SIZE == graph.CACHE_SIZE
    text = HEADER + "workflow:\n  - step: start\n    tool: {kind: noop}\n"
    one = parse_playbook(text, "p.yaml").playbook
    playbooks = [one.model_copy() for _ in range(300)]
    graphs = [graph.graph_of(p) for p in playbooks]
    # Every one of the 300 live playbooks still has its graph: none was built again.
    assert all(graph.graph_of(p) is g for p, g in zip(playbooks, graphs, strict=True))


def test_the_least_recently_used_graph_goes_first() -> None:
    text = HEADER + "workflow:\n  - step: start\n    tool: {kind: noop}\n"
    one = parse_playbook(text, "q.yaml").playbook
    playbooks = [one.model_copy() for _ in range(graph.CACHE_SIZE + 1)]
    first = graph.graph_of(playbooks[0])
    for p in playbooks[1:-1]:
        graph.graph_of(p)
    assert graph.graph_of(playbooks[0]) is first  # used again: now the most recent
    graph.graph_of(playbooks[-1])  # one over the size: playbooks[1] is dropped, not [0]
    assert graph.graph_of(playbooks[0]) is first
    assert len(graph._CACHE) == graph.CACHE_SIZE


async def test_parsing_leaves_the_event_loop_free() -> None:
    steps = "".join(f"  - step: s{i}\n    tool: {{kind: python, code: 'result = {i}'}}\n"
                    f"    next: s{i + 1}\n" for i in range(1500))
    steps += "  - step: s1500\n    tool: {kind: noop}\n"
    text = HEADER + "workflow:\n  - step: start\n    tool: {kind: noop}\n    next: s0\n" + steps
    gaps: list[float] = []

    async def tick() -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(0.005)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0.02)
    started = time.monotonic()
    playbook = await parse_off_loop(text, "big.yaml", {"noop", "python"})
    took = time.monotonic() - started
    ticker.cancel()
    assert len(playbook.steps) == 1502
    # The parse takes far longer than any pause of the loop while it ran.
    assert took > 0.3, took
    assert max(gaps) < took / 3, (max(gaps), took)
