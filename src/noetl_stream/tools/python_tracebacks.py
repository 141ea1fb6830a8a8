"""What a python step's traceback shows its author: the frames of the step's code and what it
called. The runner (tools/python_runner.py) runs in the child as source compiled under the name
`<string>`; its own frames (`_serve`, `run_code`, ...) say nothing about the step, so they go.
The step's code has its own name (`<playbook code>`, or its script file), never `<string>`.
"""

from __future__ import annotations

import re

_RUNNER_FRAME = re.compile(r'^  File "<string>", line \d+, in \w+\n', re.MULTILINE)
HEADER = "Traceback (most recent call last):\n"


def authors_frames(text: str | None) -> str | None:
    """`text` (a formatted traceback) without the runner's frames, under the usual header (the
    runner sends the last entries of a deep traceback, which may have lost it).
    """
    if not text:
        return text
    kept = _RUNNER_FRAME.sub("", text)
    return kept if kept.startswith(HEADER) or not kept.startswith("  File ") else HEADER + kept
