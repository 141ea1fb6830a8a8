"""The server's parsed playbooks and the router's graphs: one size, so every playbook in use
keeps its graph (no rebuild per event past a few hundred playbooks), and a playbook is parsed
off the event loop.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from unit_helpers import HEADER

from noetl_stream.dsl import parse_playbook
from noetl_stream.router import graph
from noetl_stream.server import playbook_parsing, server
from noetl_stream.server.playbook_parsing import parse_off_loop


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


async def test_parsing_leaves_the_event_loop_free(monkeypatch: pytest.MonkeyPatch) -> None:
    """The parse runs in another thread while the loop goes on: the loop's thread never parses,
    and a tick of the loop happens while the parse is held open."""
    loop_thread = threading.get_ident()
    parsed_in: list[int] = []
    release = threading.Event()
    real = playbook_parsing.parse_playbook

    def parse(text: str, file: str, **kw: Any) -> Any:
        parsed_in.append(threading.get_ident())
        assert release.wait(10), "the loop never ran while the parse waited"
        return real(text, file, **kw)

    monkeypatch.setattr(playbook_parsing, "parse_playbook", parse)
    text = HEADER + "workflow:\n  - step: start\n    tool: {kind: noop}\n"
    parsing = asyncio.create_task(parse_off_loop(text, "big.yaml", {"noop"}))
    while not parsed_in:
        await asyncio.sleep(0.001)  # the loop runs while the parse has begun
    release.set()
    playbook = await parsing
    assert playbook.steps[0].name == "start"
    assert parsed_in and parsed_in[0] != loop_thread
