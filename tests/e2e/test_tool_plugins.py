"""Tool plugins: the example package under tests/plugin_example, made importable with its
metadata from a temporary folder (what `pip install` would leave in site-packages), is loaded by
the worker at start, accepted by the validator, listed by `noetl-stream tools`, and runs."""

from __future__ import annotations

import shutil
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli import run_cli

from noetl_stream.bus.connection import Bus
from noetl_stream.services import run_services, submit_and_watch
from noetl_stream.tools.base import TaskCall
from noetl_stream.tools.registry import ToolRegistry, installed_kinds, tool_origins
from playbook_files import read_playbook

pytestmark = pytest.mark.e2e

EXAMPLE = Path(__file__).resolve().parents[1] / "plugin_example"

UPPER_PLAYBOOK = read_playbook("e2e", "tool_plugins_upper.yaml")


def install_into(site: Path) -> Path:
    """Lay the example out as an installed distribution: its module plus a dist-info folder whose
    metadata and entry points come from the example's own pyproject.toml."""
    project = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())["project"]
    site.mkdir(parents=True)
    shutil.copy(EXAMPLE / "noetl_upper_tool.py", site)
    dist_name = project["name"].replace("-", "_")
    info = site / f"{dist_name}-{project['version']}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\n"
                                   f"Version: {project['version']}\n")
    lines = []
    for group, entries in project["entry-points"].items():
        lines.append(f"[{group}]")
        lines.extend(f"{name} = {target}" for name, target in entries.items())
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    return site


@pytest.fixture
def plugin_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    site = install_into(tmp_path / "site")
    monkeypatch.syspath_prepend(str(site))
    try:
        yield site
    finally:
        sys.modules.pop("noetl_upper_tool", None)


@pytest.fixture
def playbook(tmp_path: Path) -> Path:
    path = tmp_path / "shout.yaml"
    path.write_text(UPPER_PLAYBOOK)
    return path


def test_plugin_kind_is_installed_without_loading_its_code(plugin_site: Path) -> None:
    assert "upper" in installed_kinds()
    assert tool_origins()["upper"] == "plugin noetl_upper_tool:UpperTool"
    assert tool_origins()["shell"] == "built-in"
    assert "noetl_upper_tool" not in sys.modules


async def test_worker_registry_builds_the_plugin_at_start(plugin_site: Path) -> None:
    registry = await ToolRegistry.create(python_children=1, python_warm=0)
    try:
        assert registry.origins["upper"] == "plugin noetl_upper_tool:UpperTool"
        outcome = await registry.get("upper").run(TaskCall(
            execution_id="e1", step="s", task="t", kind="upper", config={}, input={"text": "abc"},
            spec={}, idempotency_key="k"))
    finally:
        await registry.close()

    assert outcome.ok and outcome.result == "ABC"


async def test_playbook_with_the_plugin_kind_runs_on_server_and_worker(plugin_site: Path,
                                                                        bus: Bus) -> None:
    events: list[dict[str, Any]] = []
    async with run_services(bus, python_children=1):
        final = await submit_and_watch(bus, playbook_text=UPPER_PLAYBOOK, playbook_file="shout.yaml",
                                       payload={}, on_event=events.append, timeout_s=30)

    assert final["status"] == "completed", final.get("error")
    assert final["result"] == "HELLO PLUGIN"


async def test_cli_runs_validates_and_lists_the_plugin(plugin_site: Path, playbook: Path) -> None:
    env = {"PYTHONPATH": str(plugin_site)}

    run = await run_cli("run", str(playbook), "--json", "--quiet", "--set", "word=hi", env=env)
    valid = await run_cli("validate", str(playbook), env=env)
    listed = await run_cli("tools", env=env)

    assert run.returncode == 0, run.stderr
    assert run.summary["result"] == "HI PLUGIN"
    assert valid.returncode == 0, valid.stderr
    assert any(line.split() == ["upper", "plugin", "noetl_upper_tool:UpperTool"]
               for line in listed.stdout.splitlines()), listed.stdout
    assert any(line.split() == ["shell", "built-in"] for line in listed.stdout.splitlines())


async def test_without_the_plugin_its_kind_is_rejected(playbook: Path) -> None:
    out = await run_cli("validate", str(playbook))

    assert out.returncode == 2
    assert 'unknown tool kind "upper"' in out.stderr
