"""Tool kinds whose libraries are an optional extra of the package (`noetl-stream[duckdb]`).

Without the extra the kind is still known (playbooks validate the same everywhere), and a task
of that kind fails its step saying which extra to install on the worker, rather than the worker
failing to start.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from typing import Protocol

from noetl_stream.jsonutil import JsonValue
from noetl_stream.tools.base import Outcome, TaskCall, ToolServices

DUCKDB_INSTALL = ("the duckdb extra: pip install -e '.[duckdb]' in a checkout, or "
                  "pip install 'dist/noetl_stream-<version>-py3-none-any.whl[duckdb]'")


def duckdb_installed() -> bool:
    return importlib.util.find_spec("duckdb") is not None


class BatchWriter(Protocol):
    """A SQL kind that also writes rows in chunks inside one transaction (what `transfer` uses)."""

    kind: str

    async def run(self, call: TaskCall) -> Outcome: ...

    async def run_batches(self, call: TaskCall, setup: Sequence[str], statement: str,
                          rows: Sequence[Sequence[JsonValue]], chunk_size: int) -> Outcome: ...

    async def close(self) -> None: ...


class MissingExtraTool:
    """Stands in for a kind whose extra is not installed; every call fails with the remedy."""

    def __init__(self, kind: str, install: str) -> None:
        self.kind = kind
        self.message = (f'tool kind "{kind}" is not installed on this worker: its libraries are an '
                        f"optional extra ({install})")

    async def run(self, call: TaskCall) -> Outcome:
        return Outcome.failure(self.message, "missing_extra")

    async def run_batches(self, call: TaskCall, setup: Sequence[str], statement: str,
                          rows: Sequence[Sequence[JsonValue]], chunk_size: int) -> Outcome:
        return Outcome.failure(self.message, "missing_extra")

    async def close(self) -> None:
        return None


def duckdb_tool(services: ToolServices | None = None) -> BatchWriter:
    """The duckdb tool, or its stand-in when DuckDB is not installed."""
    if not duckdb_installed():
        return MissingExtraTool("duckdb", DUCKDB_INSTALL)
    from noetl_stream.tools.duckdb import DuckdbTool

    return DuckdbTool(services)
