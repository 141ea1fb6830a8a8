"""What python code sees: `context`, its globals, `main(...)` arguments and `libs:` modules (the
child's pure functions, run in this process), and what the router ships for code that reads
`context`."""

from __future__ import annotations

from typing import Any

import pytest
from unit_helpers import parse

from noetl_stream.dsl.pycode import reads_context
from noetl_stream.testing.router_harness import Reply, RouterHarness
from noetl_stream.tools.base import TaskCall
from noetl_stream.tools.python import python_context
from noetl_stream.tools.python_runner import LibraryError, import_libs, run_code

CONTEXT = {"workload": {"n": 2}, "n": 2, "fetch": {"rows": [1, 2]}, "execution_id": "e1",
           "step": "s", "args": {"a": 1}, "input": {"a": 1}}


def test_context_is_a_global_with_the_names_templates_read() -> None:
    code = "result = [context['workload']['n'], context['fetch']['rows'], context['step']]"

    assert run_code(code, {"a": 1}, dict(CONTEXT)) == [2, [1, 2], "s"]


def test_noetl_globals_are_there_without_an_import_and_inputs_win_over_them() -> None:
    code = ("result = [json.dumps([1]), type(uuid.uuid4()).__name__, execution_id, step, "
            "args, variables['n'], os.sep, sys.maxsize > 0, datetime.date(2024, 1, 2).isoformat()]")

    assert run_code(code, {"a": 1}, dict(CONTEXT)) == [
        "[1]", "UUID", "e1", "s", {"a": 1}, 2, "/", True, "2024-01-02"]
    assert run_code("result = step", {"step": "mine"}, dict(CONTEXT)) == "mine"


def test_main_takes_context_inputs_context_names_and_defaults() -> None:
    code = ("def main(context, a, workload, missing=9, **rest):\n"
            "    return [context['execution_id'], a, workload['n'], missing, sorted(rest)]\n")

    assert run_code(code, {"a": 1, "b": 2}, dict(CONTEXT)) == ["e1", 1, 2, 9, ["b"]]


def test_main_without_a_required_argument_says_where_to_give_it() -> None:
    with pytest.raises(TypeError, match="main\\(\\) needs argument 'limit': give it in the task's "
                                        "args or input, or take `context`"):
        run_code("def main(limit):\n    return limit\n", {}, dict(CONTEXT))


def test_top_level_return_and_result_still_give_the_value() -> None:
    assert run_code("return context['n'] + a", {"a": 1}, dict(CONTEXT)) == 3
    assert run_code("result = a", {"a": 5}) == 5


def test_libs_bind_modules_under_their_aliases_and_win_over_inputs() -> None:
    libs: dict[str, Any] = {"j": "json", "od": {"from": "collections", "import": "OrderedDict"},
                            "os.path": "os.path", "p": "os.path", "j2": {"from": "xml",
                                                                         "import": "dom"}}
    code = "result = [j.dumps(1), od.__name__, os.path.sep, p.sep, j2.__name__]"

    assert run_code(code, {"j": "shadowed"}, {}, libs) == ["1", "OrderedDict", "/", "/", "xml.dom"]


def test_missing_module_names_the_module_and_the_alias() -> None:
    with pytest.raises(LibraryError) as caught:
        import_libs({"nx": "no_such_module_for_noetl"})

    assert str(caught.value) == ("libs: module no_such_module_for_noetl (as nx) is not installed "
                                 "on this worker")
    assert (caught.value.module, caught.value.type) == ("no_such_module_for_noetl",
                                                        "ModuleNotFoundError")


def test_tracebacks_name_the_script_file() -> None:
    with pytest.raises(ZeroDivisionError) as caught:
        run_code("x = 1\nresult = 1 / 0\n", {}, {}, None, "./scripts/x.py")

    assert caught.traceback[-1].path == "./scripts/x.py"


def test_python_context_adds_noetl_names_to_what_templates_saw() -> None:
    call = TaskCall(execution_id="e9", step="load", task="t", kind="python", config={},
                    input={"k": 1}, spec={}, idempotency_key="x",
                    context={"workload": {"n": 1}, "args": {"step_arg": 2}, "fetch": [1]})

    context = python_context(call)

    assert context == {"workload": {"n": 1}, "fetch": [1], "args": {"k": 1}, "input": {"k": 1},
                       "execution_id": "e9", "step": "load",
                       "job": {"uuid": "e9", "execution_id": "e9", "id": "e9"}}


@pytest.mark.parametrize(("code", "reads"), [
    ("result = context['a']", True),
    ("def main(context):\n    return 1\n", True),
    ("result = {{ workload.n }} + len(context)", True),  # not Python yet: the word decides
    ("# the context of this code\nresult = 1", False),
    ("result = {'context': 1}", False),
])
def test_reads_context(code: str, reads: bool) -> None:
    assert reads_context(code) is reads


def test_router_ships_every_finished_step_to_code_that_reads_context() -> None:
    playbook = parse("""
        workload: {big: [1, 2, 3], small: 1}
        workflow:
          - step: start
            next: [other]
          - step: other
            next: [plain]
          - step: plain
            tool: {kind: python, code: "result = {{ small }}"}
            next: [reader]
          - step: reader
            tool: {kind: python, code: "result = context['start']"}
    """)
    harness = RouterHarness(playbook)

    harness.run(lambda cmd: Reply(result={"from": cmd["step"]}))

    (plain,) = harness.commands_for("plain")
    (reader,) = harness.commands_for("reader")
    assert plain["context"]["steps"] == {}
    assert plain["context"]["workload"] == {"small": 1}
    assert set(reader["context"]["steps"]) == {"start", "other", "plain"}
    assert reader["context"]["workload"] == {"big": [1, 2, 3], "small": 1}
