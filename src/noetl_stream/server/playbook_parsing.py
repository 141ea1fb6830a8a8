"""Parsing a playbook in the server, off its event loop.

A playbook is parsed when its text is first seen (a request) or when a server meets an execution
of one it has not parsed yet (after a restart, or on another server). Parsing a large playbook
takes long enough to hold up every event and heartbeat of the loop, so it runs in a thread; the
parser is pure, so nothing it touches is shared with the loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection

from noetl_stream.dsl import parse_playbook
from noetl_stream.dsl.models import Playbook
from noetl_stream.router.graph import CACHE_SIZE

# Parsed playbooks a server keeps: as many as the router keeps graphs of, so each one in use
# keeps its graph.
PLAYBOOK_CACHE_SIZE = CACHE_SIZE


async def parse_off_loop(text: str, file: str, kinds: Collection[str]) -> Playbook:
    """The parsed playbook; raises PlaybookError as parse_playbook does."""
    return (await asyncio.to_thread(parse_playbook, text, file, kinds=kinds)).playbook
