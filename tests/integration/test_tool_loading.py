"""A worker imports a built-in tool's libraries when a step of its kind first runs, not at start:
DuckDB alone is about 45 MB of a worker's memory (bench/README.md "Memory")."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration

SCRIPT = """
import asyncio, sys
from noetl_stream.tools.registry import ToolRegistry

async def main():
    registry = await ToolRegistry.create(python_children=1, python_warm=0)
    try:
        print("duckdb" in sys.modules, "duckdb" in registry.kinds)
        tool = registry.get("duckdb")
        print("duckdb" in sys.modules, registry.get("duckdb") is tool)
    finally:
        await registry.close()

asyncio.run(main())
"""


def test_duckdb_is_imported_by_the_first_duckdb_step_not_by_the_workers_start() -> None:
    pytest.importorskip("duckdb")
    # A fresh interpreter: this one may have imported DuckDB for another test.
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          timeout=120, check=True)

    assert done.stdout.split() == ["False", "True", "True", "True"]
