"""Verifying every execution a test (or a chaos run) made on its NATS (`noetl-stream verify
--all`, a few at a time): the e2e suite checks this after each test, `make chaos` at its end.
"""

from __future__ import annotations

import asyncio

from noetl_stream.bus.connection import Bus
from noetl_stream.server.verify import Verdict, execution_ids, verify

AT_ONCE = 8  # executions verified concurrently


async def _verdict(bus: Bus, execution_id: str) -> Verdict:
    try:
        return await verify(bus, execution_id)
    except Exception as exc:  # a record that is no state at all (garbage a test planted)
        return Verdict(execution_id, "unknown", f"unreadable: {type(exc).__name__}: {exc}")


async def verify_every_execution(bus: Bus) -> list[Verdict]:
    """A verdict for each execution with a committed state."""
    found = await execution_ids(bus)
    verdicts: list[Verdict] = []
    for start in range(0, len(found), AT_ONCE):
        verdicts += await asyncio.gather(*(_verdict(bus, e) for e in found[start:start + AT_ONCE]))
    return verdicts


def differences(verdicts: list[Verdict]) -> str | None:
    """One line naming the executions that differ from their events, or None."""
    different = [v for v in verdicts if v.outcome == "different"]
    if not different:
        return None
    first = different[0]
    return (f"{len(different)} of {len(verdicts)} executions differ from their events; "
            f"{first.execution_id} at {first.detail}")
