"""The README's commands do what the README shows."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from cli import run_cli

from noetl_stream.dsl import parse_playbook

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()

pytestmark = pytest.mark.e2e


def _readme_block_after(marker: str) -> str:
    start = README.index(marker)
    block = re.search(r"```(?:\w+)?\n(.*?)```", README[start:], re.DOTALL)
    assert block is not None, f"no code block after {marker!r}"
    return block.group(1)


async def test_readme_run_command_prints_the_result_it_shows() -> None:
    block = _readme_block_after("Progress goes to stderr")
    command = block.splitlines()[0]
    assert command.startswith("$ noetl-stream run ")
    args = command.removeprefix("$ noetl-stream ").split()
    shown_result = json.loads(block[block.index("\n{") + 1:])

    result = await run_cli(*args, cwd=ROOT)

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == shown_result
    for line in ("embedded nats-server: v", "▶ start", "square: 3/3", "✓ summary", "completed"):
        assert line in result.stderr


def _normalized(text: str) -> object:
    """The playbook's IR without source positions, code compared without trailing newlines."""

    def strip(value: object) -> object:
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in ("line", "file")}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value.rstrip() if isinstance(value, str) else value

    return strip(parse_playbook(text).playbook.model_dump(mode="json"))


def test_readme_playbook_is_the_example_file() -> None:
    shown = _readme_block_after("## A playbook and its live output")
    example = (ROOT / "playbooks/examples/hello.yaml").read_text()
    assert _normalized(shown) == _normalized(example)
