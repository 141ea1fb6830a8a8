"""The script the `python` tool's child runs (`python -c`): the runner's parts in one text.

The child imports nothing of noetl_stream (it may run as a user who cannot enter the folder the
package is installed in), so the worker reads the parts' files and hands their texts over. The
script makes each part a module of a package of its own, `__noetl_runner__`, so the parts'
relative imports of each other work there as they do in the package, and compiles each under
a file name of its own (tools/python_tracebacks.py), which is how a step's traceback tells the
runner's frames from the step's (whose code may exec() strings, named `<string>`).
"""

from __future__ import annotations

import functools
from pathlib import Path

from noetl_stream.tools.python_tracebacks import runner_file

PACKAGE = "__noetl_runner__"
# Each part after the parts it imports; the last one's main() serves.
PARTS = ("python_runner_values", "python_runner_code", "python_runner_user",
         "python_runner_protocol", "python_runner_forking", "python_runner")

_HEAD = """\
import sys, types
sys.modules[{package!r}] = types.ModuleType({package!r})
sys.modules[{package!r}].__path__ = []
def _part(name, file, text):
    module = types.ModuleType({package!r} + "." + name)
    module.__package__ = {package!r}
    sys.modules[module.__name__] = module
    exec(compile(text, file, "exec"), module.__dict__)
    return module
"""


@functools.cache
def runner_source() -> str:
    """The runner's script, handed to the interpreter with `-c`: read by the worker, it works
    wherever the package is installed, even in a folder the children's users cannot enter.
    """
    folder = Path(__file__).parent
    lines = [_HEAD.format(package=PACKAGE)]
    for part in PARTS:
        text = (folder / f"{part}.py").read_text(encoding="utf-8")
        lines.append(f"_part({part!r}, {runner_file(part)!r}, {text!r})")
    lines.append(f"sys.modules[{PACKAGE!r} + '.' + {PARTS[-1]!r}].main()")
    return "\n".join(lines) + "\n"
