"""Tests of an optional extra (`pip install -e '.[duckdb]'`) skip where it is not installed.

`make test` installs the extras and sets NOETL_STREAM_TEST_EXTRAS=required: there a missing extra
fails the tests that need it instead of skipping them, so the suite cannot pass by not running.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from types import ModuleType

import pytest

REQUIRED = os.environ.get("NOETL_STREAM_TEST_EXTRAS") == "required"
DUCKDB_REASON = "the duckdb extra is not installed: pip install -e '.[duckdb]'"


def import_duckdb() -> ModuleType:
    """The duckdb module for a test module that calls it at import time."""
    if REQUIRED:
        return importlib.import_module("duckdb")
    return pytest.importorskip("duckdb", reason=DUCKDB_REASON)


# For a test that runs duckdb only through a worker (a `kind: duckdb` task or sink).
needs_duckdb = pytest.mark.skipif(not REQUIRED and importlib.util.find_spec("duckdb") is None,
                                  reason=DUCKDB_REASON)
