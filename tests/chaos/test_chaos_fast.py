"""A fast subset of the fault-injection scenarios (`make chaos` runs them all): kill -9 of the
worker whose request is applying a side effect, and re-published outcomes with poison messages.
Same checks and same zeros as `python tests/chaos/run.py`.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from harness import Knobs, table
from run import run_scenarios
from scenarios import BY_NAME

pytestmark = pytest.mark.e2e

SEED = 7


@pytest.mark.timeout(90)
async def test_chaos_worker_kill_and_duplicates_keep_every_transition_once(tmp_path: Path) -> None:
    rows = await run_scenarios([BY_NAME["worker-kill-during"], BY_NAME["duplicates-poison"]],
                               executions=8, seed=SEED, knobs=Knobs(lease_s=2.0),
                               folder=tmp_path, log=False)
    report = table(rows)
    for row in rows:
        assert row.ok, report
        assert row.completed == row.identical == row.executions, report
        assert (row.duplicate_completions, row.duplicate_effects, row.stuck) == (0, 0, 0), report
