"""Child process of the `python` tool: runs user code, one request at a time, forever.

Started as a plain script (not through the package) so it boots fast and imports nothing of ours.
Protocol on a private pipe: 4-byte big-endian length + JSON, request {code, input}, reply
{status, result | error, stdout}. Anything the user code writes to fd 1 goes to stderr instead,
so it can never corrupt the protocol.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import inspect
import io
import os
import struct
import sys
import traceback
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

import orjson


def _dumps(value: Any) -> bytes:
    return orjson.dumps(value, default=_fallback, option=orjson.OPT_NON_STR_KEYS)


_loads: Callable[[bytes], Any] = orjson.loads


def _fallback(value: Any) -> Any:
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


_BODY = "__noetl_body__"
LOOP_MARK = "__noetl_loop_results__"


class LoopResults(list[Any]):
    """A loop step's results: a list, that also reads as NoETL's `{results, count, stats}`
    mapping (the runner imports nothing of noetl_stream, so dsl/values.py is mirrored here).
    """

    def get(self, key: str, default: Any = None) -> Any:
        if key == "results":
            return list(self)
        if key == "count":
            return len(self)
        if key == "stats":
            return {"total": len(self), "success": len(self), "failed": 0}
        return default


def _decode_inputs(inputs: dict[str, Any]) -> dict[str, Any]:
    return {k: LoopResults(v[LOOP_MARK]) if isinstance(v, dict) and list(v) == [LOOP_MARK] else v
            for k, v in inputs.items()}


def _compile(code: str) -> tuple[Any, bool]:
    """Compile user code; a top-level `return` makes the code the body of a function."""
    tree = ast.parse(code, "<playbook code>", "exec")
    has_return = any(isinstance(n, ast.Return) for n in _top_level_nodes(tree.body))
    if not has_return:
        return compile(tree, "<playbook code>", "exec"), False
    wrapper = ast.parse(f"def {_BODY}():\n    return locals().get('result')\n")
    func = wrapper.body[0]
    assert isinstance(func, ast.FunctionDef)
    func.body = tree.body + func.body
    module = ast.Module(body=[func], type_ignores=[])
    ast.fix_missing_locations(module)
    return compile(module, "<playbook code>", "exec"), True


def _top_level_nodes(body: list[ast.stmt]) -> Iterator[ast.AST]:
    """Statements outside any def/class, where a `return` means 'the code returns'."""
    stack: list[ast.AST] = list(body)
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.stmt):
                stack.append(child)


def _call_main(main: Callable[..., Any], inputs: dict[str, Any]) -> Any:
    params = inspect.signature(main).parameters
    if any(p.kind == p.VAR_KEYWORD for p in params.values()):
        kwargs = dict(inputs)
    else:
        kwargs = {k: v for k, v in inputs.items() if k in params}
    value = main(**kwargs)
    if inspect.iscoroutine(value):
        value = asyncio.run(value)
    return value


def run_code(code: str, inputs: dict[str, Any]) -> Any:
    namespace = {"__name__": "__noetl__", "input_data": dict(inputs), **inputs}
    compiled, wrapped = _compile(code)
    exec(compiled, namespace)
    if wrapped:
        return namespace[_BODY]()
    main = namespace.get("main")
    if callable(main) and getattr(main, "__module__", None) == "__noetl__":
        return _call_main(main, inputs)
    return namespace.get("result")


def _read_exactly(stream: BinaryIO, size: int) -> bytes:
    """`size` bytes, or fewer only at end of input (an unbuffered pipe returns what it has)."""
    parts: list[bytes] = []
    left = size
    while left > 0:
        chunk = stream.read(left)
        if not chunk:
            break
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def _serve(proto_in: BinaryIO, proto_out: BinaryIO) -> None:
    while True:
        head = _read_exactly(proto_in, 4)
        if len(head) < 4:
            return
        (size,) = struct.unpack(">I", head)
        request = _loads(_read_exactly(proto_in, size))
        captured = io.StringIO()
        try:
            with contextlib.redirect_stdout(captured):
                value = run_code(request["code"], _decode_inputs(request.get("input") or {}))
            reply = {"status": "ok", "result": value}
        except SystemExit as exc:
            reply = {"status": "error", "error": {"message": f"code called exit({exc.code})",
                                                  "type": "SystemExit"}}
        except BaseException as exc:  # the user's code may raise anything; report, keep serving
            tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
            reply = {"status": "error", "error": {"message": f"{type(exc).__name__}: {exc}",
                                                  "type": type(exc).__name__,
                                                  "traceback": "".join(tb[-6:])}}
        reply["stdout"] = captured.getvalue()[-8192:]
        try:
            data = _dumps(reply)
        except (TypeError, ValueError) as exc:
            data = _dumps({"status": "error", "error": {"message": f"result is not JSON: {exc}",
                                                        "type": "TypeError"}})
        proto_out.write(struct.pack(">I", len(data)) + data)
        proto_out.flush()


def main() -> None:
    # Keep private copies of the pipes, then point fd 0/1 elsewhere so user code cannot touch them.
    proto_in = os.fdopen(os.dup(0), "rb", buffering=0)
    proto_out = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)
    sys.stdin = open(os.devnull)  # noqa: SIM115 - replaces stdin for the process's life
    _serve(proto_in, proto_out)


if __name__ == "__main__":
    main()
