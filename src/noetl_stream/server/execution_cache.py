"""The execution states and parsed playbooks a server keeps between events.

A state is read from KV `noetl_executions` the first time an event of its execution comes here,
and again whenever the copy held may be stale (a failed commit, a partition pinned here). As it
is read, whatever outbox its last committer may not have published goes out again
(outbox_marks.py). Both maps are bounded and drop the least recently stored entry first: the
cache is only a shortcut, and a stale state fails its revision check on commit.
"""

from __future__ import annotations

import asyncio
from typing import Any

from nats.js.errors import KeyNotFoundError
from nats.js.kv import KeyValue

from noetl_stream import jsonutil
from noetl_stream.bus.connection import Bus
from noetl_stream.dsl.models import Playbook
from noetl_stream.observe import tracing
from noetl_stream.router.state import ExecutionState
from noetl_stream.server.outbox_marks import OutboxMarks
from noetl_stream.server.partitions import partition_of
from noetl_stream.server.playbook_parsing import ParsedPlaybooks, parse_off_loop
from noetl_stream.server.retention import EXECUTIONS_BUCKET
from noetl_stream.server.state_codec import writable
from noetl_stream.server.versions import Cached
from noetl_stream.state.step_results import StepResults

STATE_CACHE_SIZE = 10_000  # execution states kept in memory between their events


class ExecutionCache:
    """States by execution id and parsed playbooks by catalog key, read from KV when missing."""

    def __init__(self, bus: Bus, step_results: StepResults, marks: OutboxMarks) -> None:
        self.bus = bus
        self._states: dict[str, Cached] = {}
        self._playbooks = ParsedPlaybooks()
        self._storing = asyncio.Lock()  # parsing and storing a playbook not seen before
        self._step_results = step_results
        self._marks = marks
        self._executions: KeyValue | None = None
        self._catalog: KeyValue | None = None

    async def open(self) -> None:
        self._executions = await self.bus.js.key_value(EXECUTIONS_BUCKET)
        self._catalog = await self.bus.js.key_value("noetl_catalog")

    @property
    def executions(self) -> KeyValue:
        """KV `noetl_executions` (after `open`)."""
        assert self._executions is not None
        return self._executions

    async def load(self, execution_id: str) -> Cached | None:
        """The execution's state as held here, else as committed; None when it has none."""
        cached = self._states.get(execution_id)
        if cached is not None:
            return cached
        try:
            entry = await self.executions.get(execution_id)
        except KeyNotFoundError:
            return None
        if entry.value is None:
            return None
        # A state a newer release wrote is refused here, before anything changes it: its events
        # are handed back (dispositions.py `newer_format`) for a server that reads it.
        state = writable(ExecutionState.from_dict(jsonutil.loads(entry.value)))
        await self._step_results.load(state)
        playbook = await self.playbook(state.playbook_key)
        # Whatever the last committer may not have published goes out again (outbox_marks.py).
        revision = int(entry.revision or 0)
        await self._marks.republish(execution_id, revision, state.outbox,
                                    tracing.command_headers(state.trace))
        cached = Cached(state, revision, playbook)
        self.remember(execution_id, cached)
        return cached

    def remember(self, execution_id: str, cached: Cached) -> None:
        # Bounded: with several servers, an execution another server finished stays cached here
        # until evicted (the cache is only a shortcut; a stale entry fails its revision check).
        _bounded_put(self._states, execution_id, cached, STATE_CACHE_SIZE)

    def forget(self, execution_id: str) -> None:
        """Drop the state held: the next `load` reads the committed one."""
        self._states.pop(execution_id, None)

    def forget_partition(self, partition: int) -> None:
        """Called when a partition's pin comes here: the states cached of that partition's
        executions may be stale (another server held it), so they are read from KV again.
        """
        partitions = self.bus.topology.router_decl().partitions
        for execution_id in [e for e in self._states if partition_of(e, partitions) == partition]:
            del self._states[execution_id]

    async def playbook(self, key: str) -> Playbook:
        """The playbook stored under catalog `key`, parsed once per server."""
        assert self._catalog is not None
        return await self._playbooks.load(self._catalog, key)

    async def playbook_of_request(self, key: str, text: str, file: str) -> Playbook:
        """A request's playbook `text`, parsed and stored in the catalog under `key` once per
        server; raises PlaybookError as parse_playbook does.
        """
        # Parsing is the costliest part of a request, and 50 requests for one playbook are the
        # common case. The lock keeps a burst of them from all parsing it before the first one
        # has stored it.
        playbook = self._playbooks.get(key)
        if playbook is None:
            async with self._storing:
                playbook = self._playbooks.get(key)
                if playbook is None:
                    playbook = await parse_off_loop(text, file, self._playbooks.kinds)
                    assert self._catalog is not None
                    await self._catalog.put(key, text.encode())
                    self._playbooks.put(key, playbook)
        return playbook


def _bounded_put(cache: dict[str, Any], key: str, value: object, limit: int) -> None:
    """Insert or refresh `key`, dropping the least recently stored entries beyond `limit`."""
    cache.pop(key, None)
    cache[key] = value
    while len(cache) > limit:
        del cache[next(iter(cache))]
