"""Execution ids through `noetl-stream run`, as a user meets them: the id a run prints is a
positive int64, and `{{ execution_id }}` of a parent and of its child fits a PostgreSQL BIGINT
column."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import pytest

from playbook_files import read_playbook

pytestmark = pytest.mark.integration

CLI = Path(sys.executable).with_name("noetl-stream")

PARENT = read_playbook("integration", "run_ids_in_postgres_parent.yaml")

CHILD = read_playbook("integration", "run_ids_in_postgres_child.yaml")


async def test_run_ids_of_parent_and_child_are_int64s_a_bigint_column_stores(
        tmp_path: Path, pg_dsn: str) -> None:
    (tmp_path / "parent.yaml").write_text(PARENT)
    (tmp_path / "child.yaml").write_text(CHILD)
    proc = await asyncio.create_subprocess_exec(
        str(CLI), "run", str(tmp_path / "parent.yaml"), "--json", "--quiet",
        "--set", f"dsn={pg_dsn}", stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, stdin=asyncio.subprocess.DEVNULL, env=dict(os.environ))
    out, err = await asyncio.wait_for(proc.communicate(), 120)

    assert proc.returncode == 0, err.decode()[-2000:]
    summary = json.loads(out)
    execution_id = summary["execution_id"]
    assert isinstance(execution_id, str) and 0 < int(execution_id) < 2**63
    assert execution_id == str(int(execution_id))  # plain digits, no sign, no padding
    parent_row, child_row = summary["result"]["rows"]
    assert parent_row == {"execution_id": int(execution_id), "parent_id": None}
    assert child_row["parent_id"] == int(execution_id)
    assert 0 < child_row["execution_id"] < 2**63
    assert summary["steps"]["child"]["status"] == "completed"
