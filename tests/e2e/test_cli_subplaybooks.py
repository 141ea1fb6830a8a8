"""Sub-playbooks through the CLI: children named by file travel with `run`; children named by
catalog path come from `register`; a missing or invalid child is a registration error."""

from __future__ import annotations

import pytest
from cli import PLAYBOOKS, run_cli, run_playbook

pytestmark = pytest.mark.e2e


async def test_run_ships_children_named_by_file_and_waits_for_each() -> None:
    out = await run_playbook("subplaybook_parent.yaml")

    assert out.returncode == 0, out.stderr
    summary = out.summary
    assert summary["status"] == "completed", summary["error"]
    # n=2 -> 4 -> 5, n=3 -> 9 -> 10: each child waited for its own grandchild.
    assert summary["steps"]["start"]["result"] == [{"plus_one": 5}, {"plus_one": 10}]
    assert summary["result"] == {"sum": 15}


async def test_missing_or_invalid_child_file_rejects_the_parent_with_file_and_line() -> None:
    path = PLAYBOOKS / "subplaybook_bad_children.yaml"
    child = PLAYBOOKS / "subplaybook" / "bad_child.yaml"

    out = await run_playbook("subplaybook_bad_children.yaml")

    assert out.returncode == 2
    assert out.stdout == ""
    assert f'{path}:8: step "start" field "tool.path": child playbook "./subplaybook/nope.yaml"' \
        in out.stderr
    assert "cannot be read" in out.stderr
    assert f'{path}:11: step "start" field "tool.path": child playbook ' \
        '"./subplaybook/bad_child.yaml" is invalid' in out.stderr
    assert f'{child}:8: step "start" field "tool.kind": unknown tool kind "pyton"' in out.stderr


async def test_register_puts_a_playbook_under_its_path_for_later_runs() -> None:
    registered = await run_cli("register", str(PLAYBOOKS / "subplaybook" / "child.yaml"))
    assert registered.returncode == 0, registered.stderr
    assert "registered e2e/subplaybook/child" in registered.stdout

    out = await run_playbook("subplaybook_by_path.yaml")

    assert out.returncode == 0, out.stderr
    assert out.summary["result"] == {"plus_one": 17}


async def test_validate_checks_children_named_by_file() -> None:
    out = await run_cli("validate", str(PLAYBOOKS / "subplaybook_bad_children.yaml"))

    assert out.returncode == 2
    assert "unknown tool kind" in out.stderr
