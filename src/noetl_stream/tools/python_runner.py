"""Child process of the `python` tool: runs user code, one request at a time, forever.

Started as a plain script (`python -c`, with the runner's text, not through the package) so it
boots fast, imports nothing of ours, and runs wherever the package is installed. Its parts are
the modules `python_runner_*.py`, which import only each other (relatively) and the standard
library and orjson; tools/python_runner_source.py puts their texts into the one script the
child is given, each compiled under a file name of its own (tools/python_tracebacks.py).
The pipe's protocol is python_runner_protocol.py's, the code's globals python_runner_code.py's.
"""

from __future__ import annotations

import sys

from .python_runner_code import LibraryError, import_libs, run_code
from .python_runner_forking import fork_server
from .python_runner_protocol import serve_fds
from .python_runner_user import become
from .python_runner_values import ListView, TailBuffer, captured_output

# Kept importable from here, where they were first defined.
__all__ = ["LibraryError", "ListView", "TailBuffer", "captured_output", "import_libs", "main",
           "run_code"]


def main() -> None:
    if sys.argv[1:] == ["fork-server"]:
        fork_server()
        return
    if len(sys.argv) == 4:  # uid, gid, exclusive: the worker started the runner as root
        become(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "exclusive")
    serve_fds()
