"""Child process of the `python` tool: runs user code, one request at a time, forever.

Started as a plain script (`python -c`, with this file's text, not through the package) so it
boots fast, imports nothing of ours, and runs wherever the package is installed.
Protocol on a private pipe: 4-byte big-endian length + JSON, request {code, input, context, libs,
filename}, reply {status, result | error, output}. What the code prints through `sys.stdout` and
`sys.stderr` is captured per request (`output`: the last OUTPUT_TAIL_BYTES of each stream, their
whole sizes, whether anything was cut). Anything written to fd 1 below Python (a C extension, a
subprocess) goes to the worker's stderr instead, so it can never corrupt the protocol.

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
import contextlib
import datetime
import gc
import importlib
import inspect
import io
import json
import os
import struct
import sys
import traceback
import uuid
from collections.abc import Callable, Iterator, Mapping
from types import CodeType
from typing import Any, BinaryIO, TypedDict

import orjson


def _dumps(value: object) -> bytes:
    # Subclasses pass through to _fallback, so a ListView the code hands back is its list again.
    return orjson.dumps(value, default=_fallback,
                        option=orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_SUBCLASS)


_loads: Callable[[bytes], Any] = orjson.loads


def _fallback(value: object) -> object:
    if isinstance(value, ListView):
        return value.items_list()
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, (set, frozenset, tuple, list)):
        return list(value)
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


_BODY = "__noetl_body__"
OUTPUT_TAIL_BYTES = 64 * 1024  # kept per stream and request; the total size is reported too


class TailBuffer(io.TextIOBase):
    """A text stream that keeps only its last `limit` bytes (UTF-8) and counts all it was given,
    so a script printing gigabytes costs the worker no more than `limit`.
    """

    def __init__(self, limit: int = OUTPUT_TAIL_BYTES) -> None:
        super().__init__()
        self.limit = limit
        self.total = 0
        self._parts: list[bytes] = []
        self._held = 0

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        data = text.encode("utf-8", errors="replace")
        self.total += len(data)
        self._parts.append(data)
        self._held += len(data)
        if self._held > 2 * self.limit:  # trimmed now and then, not on every write
            self._trim()
        return len(text)

    def _trim(self) -> None:
        joined = b"".join(self._parts)[-self.limit:]
        self._parts, self._held = [joined], len(joined)

    def tail(self) -> str:
        self._trim()
        # A cut may fall inside a multi-byte character: drop its remains rather than fail.
        return b"".join(self._parts).decode("utf-8", errors="ignore")


def captured_output(out: TailBuffer, err: TailBuffer) -> dict[str, str | int | bool]:
    return {"stdout": out.tail(), "stderr": err.tail(), "stdout_bytes": out.total,
            "stderr_bytes": err.total,
            "truncated": out.total > out.limit or err.total > err.limit}
LIST_MARK = "__noetl_list_view__"


class ListView(dict[str, Any]):
    """A list result that NoETL hands to python code as a mapping: a loop's `{results, count,
    stats}`, an http list body's `{data, body, status_code, headers}` (playbooks test
    `isinstance(x, dict)` and read `x["stats"]`, `x.get("data")`). Code written for a list still
    works: it iterates, counts, indexes and slices the items, and compares equal to their list;
    a result that contains it carries the list. The runner imports nothing of noetl_stream, so
    dsl/values.py's ListView (a list with names) is mirrored here by its mapping twin.
    """

    def __init__(self, items: list[Any], names: dict[str, Any], itself: list[str]) -> None:
        super().__init__({**names, **{name: list(items) for name in itself}})
        self._items = list(items)

    def items_list(self) -> list[Any]:
        return list(self._items)

    def __iter__(self) -> Iterator[Any]:
        items: list[Any] = self._items
        return iter(items)

    def __len__(self) -> int:
        return len(self._items)

    def __reversed__(self) -> Iterator[Any]:
        return iter(self._items[::-1])

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, (int, slice)):
            return self._items[key]
        return super().__getitem__(key)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, list):
            return self._items == other
        return super().__eq__(other)

    __hash__ = None

    def __repr__(self) -> str:
        return repr(self._items)

    def index(self, value: Any, *args: Any) -> int:
        return self._items.index(value, *args)


def _decode(value: object) -> object:
    if isinstance(value, dict) and LIST_MARK in value:
        return ListView(value[LIST_MARK], value.get("names") or {}, value.get("itself") or [])
    return value


def _decode_inputs(inputs: Mapping[str, object]) -> dict[str, object]:
    return {k: _decode(v) for k, v in inputs.items()}


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
        out, err = TailBuffer(), TailBuffer()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                value = run_code(request["code"], _decode_inputs(request.get("input") or {}),
                                 _decode_inputs(request.get("context") or {}),
                                 request.get("libs"), request.get("filename") or "<playbook code>")
            reply = {"status": "ok", "result": value}
        except LibraryError as exc:
            reply = {"status": "error", "error": {"message": str(exc), "kind": "import",
                                                  "type": exc.type, "module": exc.module}}
        except SystemExit as exc:
            reply = {"status": "error", "error": {"message": f"code called exit({exc.code})",
                                                  "type": "SystemExit"}}
        except BaseException as exc:  # the user's code may raise anything; report, keep serving
            tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
            reply = {"status": "error", "error": {"message": f"{type(exc).__name__}: {exc}",
                                                  "type": type(exc).__name__,
                                                  "traceback": "".join(tb[-6:])}}
        reply["output"] = captured_output(out, err)
        try:
            data = _dumps(reply)
        except (TypeError, ValueError) as exc:
            data = _dumps({"status": "error", "error": {"message": f"result is not JSON: {exc}",
                                                        "type": "TypeError"}})
        proto_out.write(struct.pack(">I", len(data)) + data)
        proto_out.flush()


_LIBC: list[Any] = []  # libc, loaded once (before any user change); forks inherit it


def _libc() -> Any:
    if not _LIBC:
        import ctypes  # only here: start-up imports nothing unused
        _LIBC.append(ctypes.CDLL(None))
    return _LIBC[0]


def _prctl(option: int, value: int) -> None:
    _libc().prctl(option, value, 0, 0, 0)


def _close_to_same_user() -> None:
    """Non-dumpable: another process of this uid (a child of another execution, when the worker
    cannot give each its own) can then neither read our memory and environment under /proc nor
    ptrace us. Linux only; elsewhere nothing to do.
    """
    if sys.platform.startswith("linux"):
        _prctl(4, 0)  # PR_SET_DUMPABLE, 0


def _import_dirs() -> list[list[str]]:
    """The lists of folders imports search: sys.path and every loaded package's __path__."""
    lists: list[list[str]] = [sys.path]
    for module in list(sys.modules.values()):
        found = getattr(module, "__path__", None)
        if isinstance(found, list):
            lists.append(found)
    return lists


def _hold_import_dirs() -> dict[str, int]:
    """As root, before the user changes: a handle on every folder imports search, for those the
    new user cannot reach by name (a virtualenv under a private folder such as /root).
    """
    held: dict[str, int] = {}
    for dirs in _import_dirs():
        for folder in dirs:
            if folder and folder not in held:
                with contextlib.suppress(OSError):
                    held[folder] = os.open(folder, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    return held


_IMPORT_LISTS: list[list[str]] = []  # read once by a fork server: in a fork, a module read is a page copied


def _reach_import_dirs(held: dict[str, int]) -> None:
    """As the new user: a folder it cannot reach by name is searched through its handle
    (`/proc/self/fd/N`: the kernel then checks the folder itself, not the private ones above it).
    """
    through: dict[str, str] = {}
    for folder, fd in held.items():
        if os.access(folder, os.R_OK | os.X_OK):
            os.close(fd)
        else:
            through[folder] = f"/proc/self/fd/{fd}"
    if through:
        for dirs in _IMPORT_LISTS or _import_dirs():
            if any(folder in through for folder in dirs):
                dirs[:] = [through.get(folder, folder) for folder in dirs]
        sys.path_importer_cache.clear()


KILL_ROUNDS = 3  # tools/python_slots.py KILL_ROUNDS says why so few


def _kill_leftovers() -> None:
    """Every other process of this uid is what an earlier holder of the slot left running:
    kill(-1) reaches exactly the processes this uid may signal, never the caller itself. It
    succeeds whenever any process exists, so its answer cannot end the rounds early; one round
    suffices (a fork under way when SIGKILL comes is aborted), each walks the process table.
    """
    for _ in range(KILL_ROUNDS):
        try:
            os.kill(-1, 9)
        except ProcessLookupError:  # no other process on the machine at all
            return


def become(uid: int, gid: int, exclusive: bool, held: dict[str, int] | None = None) -> None:
    """Started as root (so it could read an interpreter in a private folder), the runner becomes
    its slot's user before it reads any code: no groups, no capability, nothing of the earlier
    holder left running, killed with its parent (the kernel clears the death signal when the
    user changes, so it is set after), non-dumpable, and no way back through a setuid program.
    `exclusive`: the uid is this child's alone, so every other process of it is killed.
    """
    held = _hold_import_dirs() if held is None else held
    _change_user(uid, gid, exclusive)
    _reach_import_dirs(held)


def _change_user(uid: int, gid: int, exclusive: bool) -> None:
    """`become`'s change of user, all a clearing child needs (it reads no code)."""
    parent = os.getppid()
    _libc()  # loaded while its files are reachable by name
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if exclusive:  # the uid is this child's alone (a slot): any other process of it is stale
        _kill_leftovers()
    _prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
    _prctl(38, 1)  # PR_SET_NO_NEW_PRIVS
    if os.getppid() != parent:  # the parent died before the death signal was set
        os._exit(1)


def _serve_fds() -> None:
    _close_to_same_user()
    # Keep private copies of the pipes, then point fd 0/1 elsewhere so user code cannot touch them.
    proto_in = os.fdopen(os.dup(0), "rb", buffering=0)
    proto_out = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)
    sys.stdin = open(os.devnull)  # noqa: SIM115 - replaces stdin for the process's life
    _serve(proto_in, proto_out)


class _Order(TypedDict, total=False):
    """A fork server's order (tools/python_forks.py writes it; this file imports nothing of
    noetl_stream): fork a child in `cwd` with `env` as user `uid` (None: the server's own), or
    `clear` what that uid left running.
    """

    cwd: str | None
    env: dict[str, str]
    clear: bool
    uid: int | None
    gid: int
    exclusive: bool


def _forked(order: _Order, channel: int, held: dict[str, int]) -> None:
    """A fork server's child: its own session, its channel as fd 0 and 1, its folder and
    environment, then its user; it serves steps until its channel closes.
    """
    import signal

    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    os.setsid()
    cwd, uid = order.get("cwd"), order.get("uid")
    if order.get("clear"):  # only there to kill what the uid left running: its user alone changes
        os.close(channel)
        if uid is not None:
            _change_user(int(uid), int(order["gid"]), bool(order.get("exclusive")))
        return
    os.dup2(channel, 0)
    os.dup2(channel, 1)
    os.close(channel)
    if cwd:
        os.chdir(cwd)
    _set_environment(order.get("env") or {})
    if uid is None:
        _prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL: it dies with the fork server
        for fd in held.values():
            os.close(fd)
    else:
        become(int(uid), int(order["gid"]), bool(order.get("exclusive")), held)
    _serve_fds()


def _set_environment(env: dict[str, str]) -> None:
    """Exactly `env`, changing only what differs (most names are the fork server's already)."""
    for name in [name for name in os.environ if name not in env]:
        del os.environ[name]
    for name, value in env.items():
        if os.environ.get(name) != value:
            os.environ[name] = value


def _warm_up() -> None:
    """Constant code served before the first fork: children share what a first step sets up."""
    framed = [_dumps({"code": code, "input": {"prev": 0}, "context": {"args": {"prev": 0}}})
              for code in ("result = {'i': prev + 1}", "def main(prev):\n    return prev\n")]
    _serve(io.BytesIO(b"".join(struct.pack(">I", len(data)) + data for data in framed)), io.BytesIO())
    _COMPILED.clear()  # no user code ran here, and a child holds only its own code


def fork_server() -> None:
    """Never runs user code: forks a fresh child per order from the worker (a JSON order and
    the child's channel on a SOCK_SEQPACKET socket at fd 0) and answers with its pid and a
    pidfd. Children start with the runner already imported, in a millisecond or two.
    """
    import signal
    import socket

    control = socket.socket(fileno=os.dup(0))
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    _prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL: it dies with the worker
    _close_to_same_user()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the kernel reaps the children
    held = _hold_import_dirs() if os.geteuid() == 0 else {}
    _IMPORT_LISTS.extend(_import_dirs() if held else [])
    _warm_up()
    while True:
        data, fds, _, _ = socket.recv_fds(control, 1 << 16, 1)
        if not data:
            return
        order = _loads(data)
        # What the server holds is never collected in a child: a collection there would touch
        # every object and copy the pages the child shares with the server.
        gc.freeze()
        pid = os.fork()
        if pid == 0:
            try:
                control.close()
                _forked(order, fds[0], held)
            except BaseException:  # reported on stderr; the worker sees the channel close
                traceback.print_exc()
            finally:
                os._exit(0)
        os.close(fds[0])
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:  # gone already: the worker sees its channel closed
            socket.send_fds(control, [struct.pack(">i", pid)], [])
            continue
        socket.send_fds(control, [struct.pack(">i", pid)], [pidfd])
        os.close(pidfd)


def main() -> None:
    if sys.argv[1:] == ["fork-server"]:
        fork_server()
        return
    if len(sys.argv) == 4:  # uid, gid, exclusive: the worker started the runner as root
        become(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "exclusive")
    _serve_fds()


if __name__ == "__main__":
    main()
