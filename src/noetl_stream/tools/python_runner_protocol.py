"""Part of the `python` tool's child (tools/python_runner.py): its pipe to the worker.

4-byte big-endian length + JSON, request {code, input, context, libs, filename}, reply {status,
result | error, output}, one request at a time until the pipe closes. What the code prints
through `sys.stdout` and `sys.stderr` is captured per request (`output`: the last
OUTPUT_TAIL_BYTES of each stream, their whole sizes, whether anything was cut). Anything written
to fd 1 below Python (a C extension, a subprocess) goes to the worker's stderr instead, so it can
never corrupt the protocol.
"""

from __future__ import annotations

import contextlib
import os
import struct
import sys
import traceback
from typing import BinaryIO

from .python_runner_code import LibraryError, run_code
from .python_runner_user import close_to_same_user
from .python_runner_values import TailBuffer, captured_output, decode_inputs, dumps, loads


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


def serve(proto_in: BinaryIO, proto_out: BinaryIO) -> None:
    while True:
        head = _read_exactly(proto_in, 4)
        if len(head) < 4:
            return
        (size,) = struct.unpack(">I", head)
        request = loads(_read_exactly(proto_in, size))
        out, err = TailBuffer(), TailBuffer()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                value = run_code(request["code"], decode_inputs(request.get("input") or {}),
                                 decode_inputs(request.get("context") or {}),
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
            data = dumps(reply)
        except (TypeError, ValueError) as exc:
            data = dumps({"status": "error", "error": {"message": f"result is not JSON: {exc}",
                                                       "type": "TypeError"}})
        proto_out.write(struct.pack(">I", len(data)) + data)
        proto_out.flush()


def serve_fds() -> None:
    """Serve the pipe at fd 0 and 1, with both pointed elsewhere for the code."""
    close_to_same_user()
    # Keep private copies of the pipes, then point fd 0/1 elsewhere so user code cannot touch them.
    proto_in = os.fdopen(os.dup(0), "rb", buffering=0)
    proto_out = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)
    sys.stdin = open(os.devnull)  # noqa: SIM115 - replaces stdin for the process's life
    serve(proto_in, proto_out)
