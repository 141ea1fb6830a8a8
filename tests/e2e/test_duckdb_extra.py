"""Without the `duckdb` extra, a `kind: duckdb` task fails its step naming the extra to install,
and the rest of the worker (python, transfer between other kinds) runs as before."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest

from playbook_files import read_playbook

pytestmark = pytest.mark.e2e

PLAYBOOK = read_playbook("e2e", "duckdb_extra.yaml")

# The CLI in a Python where `import duckdb` fails, as in an install without the extra.
WITHOUT_DUCKDB = ("import sys; sys.modules['duckdb'] = None; "
                  "from noetl_stream.cli.main import main; sys.argv[0] = 'noetl-stream'; main()")


async def test_a_duckdb_task_without_the_extra_fails_naming_it(tmp_path: Path) -> None:
    playbook = tmp_path / "needs-duckdb.yaml"
    playbook.write_text(PLAYBOOK)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", WITHOUT_DUCKDB, "run", str(playbook), "--json", "--quiet",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=dict(os.environ))
    out, err = await asyncio.wait_for(proc.communicate(), 60)

    assert proc.returncode == 1, err.decode()
    summary = json.loads(out)
    assert summary["steps"]["start"]["status"] == "completed"
    error = summary["steps"]["query"]["error"]
    assert error["kind"] == "missing_extra"
    assert "the duckdb extra: pip install -e '.[duckdb]'" in error["message"]


async def test_tools_says_duckdb_is_not_installed() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", WITHOUT_DUCKDB, "tools",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, _ = await asyncio.wait_for(proc.communicate(), 30)

    line = next(x for x in out.decode().splitlines() if x.startswith("duckdb"))
    assert "not installed" in line and ".[duckdb]" in line
