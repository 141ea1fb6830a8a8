"""A usage error (unknown command or option, missing argument, bad value) is one line on stderr
and exit 2, like every other CLI error (README: "Errors are one line on stderr").
"""

from __future__ import annotations

import pytest
from cli import run_cli

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize(("args", "line"), [
    (("run", "x.yaml", "--timeout", "0"),
     "noetl-stream: run: Invalid value for '--timeout': 0.0 is not in the range x>0. "
     "(`noetl-stream run --help`)"),
    (("trigger", "backfill", "nightly", "--from", "yesterday", "--to", "2026-01-01T00:00:00Z"),
     "noetl-stream: trigger backfill: Invalid value: not a time: 'yesterday' (write e.g. "
     "2026-11-01T02:00:00Z) (`noetl-stream trigger backfill --help`)"),
    (("executions", "list", "--limit", "0"),
     "noetl-stream: executions list: Invalid value for '--limit': 0 is not in the range x>=1. "
     "(`noetl-stream executions list --help`)"),
    (("restart", "1", "--bogus"),
     "noetl-stream: restart: No such option '--bogus'. (`noetl-stream restart --help`)"),
    (("trigger", "fire"),
     "noetl-stream: trigger fire: Missing argument 'NAME'. (`noetl-stream trigger fire --help`)"),
    (("nosuch",), "noetl-stream: No such command 'nosuch'. (`noetl-stream --help`)"),
])
async def test_a_usage_error_is_one_line_and_exit_2(args: tuple[str, ...], line: str) -> None:
    out = await run_cli(*args)
    assert out.returncode == 2
    assert out.stdout == ""
    assert out.stderr.splitlines() == [line]
