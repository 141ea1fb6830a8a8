"""What a python step's traceback shows its author: the frames of the step's code and what it
called. The runner's parts run in the child compiled under file names of their own
(`runner_file`, tools/python_runner_source.py); their frames (`serve`, `run_code`, ...) say
nothing about the step, so they go. Any other frame stays: the step's code (`<playbook code>`,
or its script file), and a string it exec()s (`<string>`).
"""

from __future__ import annotations

import re

_RUNNER_FILE = "<noetl-stream runner {}>"
# A frame of a runner part: its line, then the source line and markers Python may print under it.
_RUNNER_FRAME = re.compile(r'^  File "<noetl-stream runner \w+>", line \d+, in \w+\n(?:    .*\n)*',
                           re.MULTILINE)
HEADER = "Traceback (most recent call last):\n"


def runner_file(part: str) -> str:
    """The file name a runner part (a module name) is compiled under in the child."""
    return _RUNNER_FILE.format(part)


def authors_frames(text: str | None) -> str | None:
    """`text` (a formatted traceback) without the runner's frames, under the usual header (the
    runner sends the last entries of a deep traceback, which may have lost it).
    """
    if not text:
        return text
    kept = _RUNNER_FRAME.sub("", text)
    return kept if kept.startswith(HEADER) or not kept.startswith("  File ") else HEADER + kept
