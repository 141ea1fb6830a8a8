"""The catalog from the command line: `register` a playbook, see it in `catalog list`, read it
with `catalog show`, and `run` it by its catalog path, on the embedded nats-server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli import run_cli

pytestmark = pytest.mark.e2e

HELLO = Path(__file__).resolve().parents[2] / "playbooks" / "examples" / "hello.yaml"


async def test_register_list_show_and_run_by_catalog_path(tmp_path: Path) -> None:
    env = {"NOETL_STREAM_HOME": str(tmp_path / "home")}
    empty = await run_cli("catalog", "list", "--json", env=env)
    assert empty.returncode == 0 and json.loads(empty.stdout) == []
    nothing = await run_cli("catalog", "list", env=env)
    assert (nothing.returncode, nothing.stdout) == (
        0, "no playbooks registered (`noetl-stream register FILE` adds one)\n")

    registered = await run_cli("register", str(HELLO), env=env)
    assert registered.returncode == 0, registered.stderr
    table = await run_cli("catalog", "list", env=env)
    header, row = table.stdout.splitlines()
    assert header.split() == ["PATH", "LATEST", "VERSIONS"]
    assert row.split()[0] == "examples/hello" and row.split()[1].startswith("pb_")
    shown = await run_cli("catalog", "show", "examples/hello", env=env)
    assert shown.returncode == 0 and shown.stdout == HELLO.read_text().rstrip("\n") + "\n"

    ran = await run_cli("run", "examples/hello", "--set", "name=catalog", "--json", "--quiet",
                        env=env)
    assert ran.returncode == 0, ran.stderr
    assert ran.summary["result"]["shouted"] == "HELLO, CATALOG!"

    missing = await run_cli("run", "examples/nowhere", env=env)
    assert missing.returncode == 2
    assert missing.stderr.strip() == (
        "noetl-stream: examples/nowhere: no such file, and no playbook is registered under that "
        "catalog path (`noetl-stream catalog list` shows what is)")
    a_file = await run_cli("run", str(tmp_path / "absent.yaml"), env=env)
    assert a_file.returncode == 2 and "catalog" not in a_file.stderr
