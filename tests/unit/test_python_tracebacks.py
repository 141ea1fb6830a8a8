"""A python step's traceback: the runner's frames go, every frame of the step's code stays,
strings it exec()s included."""

from __future__ import annotations

import traceback
from typing import Any

from noetl_stream.tools.python_runner_source import PARTS, runner_source
from noetl_stream.tools.python_tracebacks import HEADER, authors_frames, runner_file


def _traceback_through_runner() -> str:
    """A traceback as the child formats one: a runner part calls the step's code, which
    exec()s a string that raises, and catches what it raises."""
    step = compile("def main():\n    exec('raise KeyError(\"id\")')\n", "<playbook code>", "exec")
    runner = compile("def serve(main):\n    try:\n        main()\n    except KeyError as exc:\n"
                     "        return exc\n", runner_file("python_runner_protocol"), "exec")
    step_globals: dict[str, Any] = {}
    runner_globals: dict[str, Any] = {}
    exec(step, step_globals)
    exec(runner, runner_globals)
    exc = runner_globals["serve"](step_globals["main"])
    assert isinstance(exc, KeyError)
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


def test_the_runners_frames_go_and_an_exec_string_frame_stays() -> None:
    shown = authors_frames(_traceback_through_runner())
    assert shown is not None
    frames = [line for line in shown.splitlines() if line.startswith("  File ")]
    assert frames == ['  File "<playbook code>", line 2, in main',
                      '  File "<string>", line 1, in <module>'], shown
    assert shown.startswith(HEADER) and shown.rstrip().endswith("KeyError: 'id'")


def test_every_runner_part_is_compiled_under_a_name_the_filter_knows() -> None:
    source = runner_source()
    for part in PARTS:
        name = runner_file(part)
        assert repr(name) in source
        frame = f'  File "{name}", line 7, in serve\n'
        assert authors_frames(HEADER + frame + '  File "<string>", line 1, in <module>\n') == (
            HEADER + '  File "<string>", line 1, in <module>\n')
