"""Parsing a playbook in the server, off its event loop.

A playbook is parsed when its text is first seen (a request) or when a server meets an execution
of one it has not parsed yet (after a restart, or on another server). Parsing a large playbook
takes long enough to hold up every event and heartbeat of the loop, so it runs in a thread; the
parser is pure, so nothing it touches is shared with the loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection

from nats.js.kv import KeyValue

from noetl_stream.dsl import parse_playbook
from noetl_stream.dsl.models import Playbook
from noetl_stream.router.graph import CACHE_SIZE
from noetl_stream.tools.registry import installed_kinds

# Parsed playbooks a server keeps: as many as the router keeps graphs of, so each one in use
# keeps its graph.
PLAYBOOK_CACHE_SIZE = CACHE_SIZE


async def parse_off_loop(text: str, file: str, kinds: Collection[str]) -> Playbook:
    """The parsed playbook; raises PlaybookError as parse_playbook does."""
    return (await asyncio.to_thread(parse_playbook, text, file, kinds=kinds)).playbook


class ParsedPlaybooks:
    """Playbooks parsed once per process, by catalog key; past PLAYBOOK_CACHE_SIZE the least
    recently stored goes first.
    """

    def __init__(self) -> None:
        # Plugin kinds installed here are valid words too; read once, without loading plugin code.
        self.kinds = installed_kinds()
        self._parsed: dict[str, Playbook] = {}

    def get(self, key: str) -> Playbook | None:
        return self._parsed.get(key)

    def put(self, key: str, playbook: Playbook) -> None:
        self._parsed.pop(key, None)
        self._parsed[key] = playbook
        while len(self._parsed) > PLAYBOOK_CACHE_SIZE:
            del self._parsed[next(iter(self._parsed))]

    async def load(self, catalog: KeyValue, key: str) -> Playbook:
        """The playbook stored in `catalog` under `key`; raises PlaybookError as parse_playbook
        does, KeyNotFoundError when the catalog has no such key.
        """
        playbook = self._parsed.get(key)
        if playbook is None:
            entry = await catalog.get(key)
            playbook = await parse_off_loop(bytes(entry.value or b"").decode(), key, self.kinds)
            self.put(key, playbook)
        return playbook
