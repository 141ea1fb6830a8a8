"""Every example playbook shipped in the repository parses, strictly (no unknown keys)."""

from __future__ import annotations

from pathlib import Path

import pytest

from noetl_stream.dsl import load_playbook

# Playbooks only: trigger documents beside them are checked by tests/unit/test_trigger_document.py.
EXAMPLES = sorted(p for p in (Path(__file__).resolve().parents[2] / "playbooks").rglob("*.yaml")
                  if "\nkind: Trigger" not in "\n" + p.read_text())


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_playbook_parses_strictly(path: Path) -> None:
    result = load_playbook(path, strict=True)
    assert result.warnings == []
    assert result.playbook.steps
