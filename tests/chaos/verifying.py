"""The last check of every scenario: each planned execution's committed state is what its
recorded events rebuild through the router (`noetl-stream verify`). A state that differs fails
the scenario, naming the execution and the field; the row's notes say how many verified.
"""

from __future__ import annotations

from typing import Any

from noetl_stream.bus.connection import connect
from noetl_stream.testing.verifying import verify_every_execution


async def verify_planned(run: Any, row: Any) -> None:
    bus = await connect(",".join(run.stack.urls), name="chaos-verify")
    try:
        verdicts = await verify_every_execution(bus)
    finally:
        await bus.close()
    ours = {p.execution_id for p in run.planned}
    mine = [v for v in verdicts if v.execution_id in ours]
    equal = sum(1 for v in mine if v.outcome == "equal")
    row.notes.append(f"verified {equal} of {len(ours)}")
    for v in mine:
        if v.outcome != "equal":
            row.failed.append(f"verify {v.execution_id}: {v.outcome} {v.detail}")
            break
    if len(mine) < len(ours):
        row.failed.append(f"verify: {len(ours) - len(mine)} executions have no committed state")
