"""No module of the package passes 600 lines (STYLE.md: past 600, split)."""

from __future__ import annotations

from pathlib import Path

import noetl_stream

ROOT = Path(noetl_stream.__file__).parent
MAX_LINES = 600


def test_no_module_passes_the_size_limit() -> None:
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in ROOT.rglob("*.py")}
    assert len(sizes) > 100  # the walk found the package
    assert {name: n for name, n in sizes.items() if n > MAX_LINES} == {}
