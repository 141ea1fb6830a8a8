"""Part of the `python` tool's child (tools/python_runner.py): running one step's code.

The code's globals, later ones winning: the modules NoETL's engines provide without an import
(`json`, `os`, `sys`, `datetime`, `uuid`), `context`, `variables` (the Rust tool's name for the
same names), `args`, `execution_id`, `step`, `data` (a sink's data), `input_data`; then every
input by name; then the `libs:` modules under their aliases, imported before the code runs.
`main(...)` is called the way NoETL's python engine calls it: a parameter named `context` gets
the context, any other its input of that name, else `context["data"]`'s or the context's, else
its default; `**kwargs` gets the remaining inputs.
"""

from __future__ import annotations

import ast
import datetime
import importlib
import inspect
import json
import os
import sys
import uuid
from collections.abc import Callable, Iterator, Mapping
from types import CodeType
from typing import Any

_BODY = "__noetl_body__"


class LibraryError(Exception):
    """A `libs:` module that cannot be imported; reported as an error of kind `import`."""

    def __init__(self, alias: str, module: str, cause: BaseException) -> None:
        shown = module if alias == module else f"{module} (as {alias})"
        if isinstance(cause, ModuleNotFoundError):
            detail = "is not installed on this worker"
        else:
            detail = f"failed to import: {type(cause).__name__}: {cause}"
        super().__init__(f"libs: module {shown} {detail}")
        self.alias = alias
        self.module = module
        self.type = type(cause).__name__


_COMPILED: dict[tuple[str, str], tuple[CodeType, bool]] = {}
COMPILED_KEPT = 64  # code texts kept compiled: an execution's steps often share theirs


def forget_compiled() -> None:
    """Drop the code kept compiled (a fork server's, before it forks: a child holds only its own)."""
    _COMPILED.clear()


def _compiled(code: str, filename: str) -> tuple[CodeType, bool]:
    """`_compile`, once per code text in this interpreter. It serves one execution only, so
    only that execution's own code is ever found here.
    """
    key = (code, filename)
    found = _COMPILED.get(key)
    if found is None:
        found = _compile(code, filename)
        if len(_COMPILED) >= COMPILED_KEPT:
            del _COMPILED[next(iter(_COMPILED))]  # the oldest
        _COMPILED[key] = found
    return found


def _compile(code: str, filename: str) -> tuple[CodeType, bool]:
    """Compile user code; a top-level `return` makes the code the body of a function."""
    tree = ast.parse(code, filename, "exec")
    has_return = any(isinstance(n, ast.Return) for n in _top_level_nodes(tree.body))
    if not has_return:
        return compile(tree, filename, "exec"), False
    wrapper = ast.parse(f"def {_BODY}():\n    return locals().get('result')\n")
    func = wrapper.body[0]
    assert isinstance(func, ast.FunctionDef)
    func.body = tree.body + func.body
    module = ast.Module(body=[func], type_ignores=[])
    ast.fix_missing_locations(module)
    return compile(module, filename, "exec"), True


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


def import_libs(libs: Mapping[str, object] | None) -> dict[str, object]:
    """The `libs:` modules by alias: `alias: module`, or `alias: {from: package, import: name}`."""
    bound: dict[str, object] = {}
    for alias, target in (libs or {}).items():
        if isinstance(target, dict):
            package, name = str(target.get("from")), str(target.get("import"))
            try:
                parent = importlib.import_module(package)
                bound[alias] = (getattr(parent, name) if hasattr(parent, name)
                                else importlib.import_module(f"{package}.{name}"))
            except ImportError as exc:
                raise LibraryError(alias, f"{package}.{name}", exc) from exc
            continue
        module = str(target)
        try:
            imported = importlib.import_module(module)
        except ImportError as exc:
            raise LibraryError(alias, module, exc) from exc
        if alias == module and "." in module:  # `import a.b` binds `a`
            top = module.split(".", 1)[0]
            bound[top] = sys.modules[top]
        else:
            bound[alias] = imported
    return bound


def _globals(inputs: Mapping[str, object], context: dict[str, object]) -> dict[str, Any]:
    """The globals the code runs with (exec's namespace: whatever the code binds)."""
    context.setdefault("variables", {k: v for k, v in context.items()})
    namespace: dict[str, Any] = {
        "__name__": "__noetl__", "json": json, "os": os, "sys": sys, "datetime": datetime,
        "uuid": uuid, "context": context, "variables": context["variables"],
        "args": context.get("args", inputs), "execution_id": context.get("execution_id"),
        "step": context.get("step"), "input_data": dict(inputs)}
    if "data" in context or "result" in context:  # a sink's data, as NoETL injects it
        namespace["data"] = context.get("data", context.get("result"))
    namespace.update(inputs)
    return namespace


def _call_main(main: Callable[..., object], inputs: Mapping[str, object],
               context: Mapping[str, object]) -> object:
    given = context.get("data")
    data: Mapping[str, object] = given if isinstance(given, dict) else {}
    kwargs: dict[str, object] = {}
    rest = False
    for param in inspect.signature(main).parameters.values():
        if param.kind == param.VAR_POSITIONAL:
            raise TypeError("main(*args) is not supported: name the inputs main takes")
        if param.kind == param.VAR_KEYWORD:
            rest = True
        elif param.name == "context":
            kwargs["context"] = context
        elif param.name in inputs:
            kwargs[param.name] = inputs[param.name]
        elif param.name in data:
            kwargs[param.name] = data[param.name]
        elif param.name in context:
            kwargs[param.name] = context[param.name]
        elif param.default is param.empty:
            raise TypeError(f"main() needs argument {param.name!r}: give it in the task's args or "
                            "input, or take `context` and read it there")
    if rest:
        kwargs.update({k: v for k, v in {**data, **inputs}.items() if k not in kwargs})
    value = main(**kwargs)
    if inspect.iscoroutine(value):
        import asyncio  # only for an `async def main`: it costs every child's start-up otherwise

        value = asyncio.run(value)
    return value


def run_code(code: str, inputs: Mapping[str, object], context: Mapping[str, object] | None = None,
             libs: Mapping[str, object] | None = None, filename: str = "<playbook code>") -> object:
    context = dict(context or {})
    namespace = _globals(inputs, context)
    namespace.update(import_libs(libs))
    compiled, wrapped = _compiled(code, filename)
    exec(compiled, namespace)
    if wrapped:
        return namespace[_BODY]()
    main = namespace.get("main")
    if callable(main) and getattr(main, "__module__", None) == "__noetl__":
        return _call_main(main, inputs, context)
    return namespace.get("result")

