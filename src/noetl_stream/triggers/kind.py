"""What marks a trigger document, apart from its model (triggers/document.py), so that telling a
trigger file from a playbook (`validate`) imports neither the model nor what it is built from.
"""

from __future__ import annotations

from pathlib import Path

KIND = "Trigger"


def is_trigger_file(path: Path) -> bool:
    """Whether the file is a `kind: Trigger` document (read as a playbook otherwise)."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError):
        return False
    return any(line.strip() == f"kind: {KIND}" for line in text.splitlines() if line[:1] != " ")
