"""What the tests of event-loop turns share: a chain of noop steps run through the in-process
services, and a counter of the loop's turns while it runs."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

from noetl_stream.bus.connection import Bus
from noetl_stream.jsonutil import JsonObject
from noetl_stream.services import run_services, submit_and_watch

STEPS = 8
CHAIN = "\n".join(["apiVersion: noetl.io/v2", "kind: Playbook", "metadata:", "  name: turns",
                   "workflow:", *(f"  - step: s{i}\n    tool: {{kind: noop}}\n    next: "
                                  f"[{{step: s{i + 1}}}]" for i in range(1, STEPS)),
                   f"  - step: s{STEPS}\n    tool: {{kind: noop}}"]) + "\n"


class Turns:
    """The turns the running event loop has taken since counting began."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.count = 0
        self._loop = loop
        self._next = loop.call_soon(self._tick)

    def _tick(self) -> None:  # one call per turn of the event loop
        self.count += 1
        self._next = self._loop.call_soon(self._tick)

    def stop(self) -> None:
        self._next.cancel()


@contextlib.contextmanager
def counting_turns() -> Iterator[Turns]:
    turns = Turns(asyncio.get_running_loop())
    try:
        yield turns
    finally:
        turns.stop()


async def run_chain(bus: Bus) -> JsonObject:
    """Run CHAIN through a server and a worker in this process; its last event."""
    async with run_services(bus):
        return await submit_and_watch(bus, playbook_text=CHAIN, playbook_file="turns.yaml",
                                      payload={}, on_event=lambda _: None, timeout_s=30)
