"""What every command shares: exit codes (the conformance contract), options, failing, running."""

from __future__ import annotations

import asyncio
import logging
import os
import select
import signal
import sys
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from noetl_stream import config
from noetl_stream.errors import InfrastructureError

if TYPE_CHECKING:
    from noetl_stream.bus.connection import Bus

# 0 completed, 1 failed or cancelled, 2 rejected input or usage error (nothing runs),
# 3 infrastructure error; `run` interrupted with Ctrl-C exits 130 (cli/running.py).
EXIT_OK, EXIT_FAILED, EXIT_REJECTED, EXIT_INFRA = 0, 1, 2, 3
EXIT_STILL_RUNNING = 4  # `run --timeout`: the wait ended, the execution did not

# `--timeout SECONDS`: a wait that ends before it starts is a typo, not a request.
POSITIVE_SECONDS = click.FloatRange(min=0, min_open=True)

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])



def _checked_nats_url(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A malformed URL is a usage error said in one line, before anything connects."""
    from noetl_stream.bus.connection import check_nats_url

    if value is None:
        return None
    try:
        return check_nats_url(value)
    except ValueError as exc:
        fail(EXIT_REJECTED, str(exc))


def refuse_unless_token(value: str, refusal: str, what: str) -> None:
    """Exit 2 in one line (`refusal: what is letters, ...`) unless `value` is one subject token,
    before anything reads NATS with it: a KV key or subject built from it would be refused with
    a traceback or an error that reads as NATS being unreachable.
    """
    from noetl_stream import ids

    if not ids.is_subject_token(value):
        fail(EXIT_REJECTED, f"{refusal}: {what} is letters, digits, '-' and '_', at most "
                            f"{ids.MAX_TOKEN_LENGTH} characters")


def checked_execution_id(ctx: click.Context, param: click.Parameter,
                         value: str | None) -> str | None:
    """An id no execution can have is refused in one line."""
    if value is not None:
        refuse_unless_token(value, f"no execution {value!r} is known", "an execution id")
    return value


execution_id_argument = click.argument("execution_id", callback=checked_execution_id)


def checked_execution_ids(ctx: click.Context, param: click.Parameter,
                          values: tuple[str, ...]) -> tuple[str, ...]:
    for value in values:
        checked_execution_id(ctx, param, value)
    return values

nats_url_option = click.option(
    "--nats-url", envvar=config.ENV_NATS_URL, default=None, metavar="URL",
    callback=_checked_nats_url,
    help="NATS server with JetStream (env NOETL_STREAM_NATS_URL). Without it, the embedded "
         "nats-server of NOETL_STREAM_HOME is started (or reused when it already runs).")
prefix_option = click.option("--prefix", envvar=config.ENV_PREFIX, default="noetl", show_default=True,
                             help="Subject prefix (env NOETL_STREAM_PREFIX).")


def _checked_server_url(ctx: click.Context, param: click.Parameter,
                        value: str | None) -> str | None:
    """`--server` is an HTTP API's address: `http://` or `https://` (or none, read as http://);
    another scheme is a usage error said in one line, before anything connects.
    """
    if value is not None and "://" in value and not value.startswith(("http://", "https://")):
        fail(EXIT_REJECTED, f"--server {value!r}: the HTTP API's URL starts with http:// or https://")
    return value


def remote_options(command: F) -> F:
    """`--server URL` and `--token TOKEN`, the same on every command that can work remotely:
    given a server, the command talks to its HTTP API (cli/remote.py) and never to NATS.
    """
    command = click.option(
        "--token", envvar=config.ENV_TOKEN, default=None, metavar="TOKEN",
        help="Session token or API key for --server (env NOETL_STREAM_TOKEN).")(command)
    return click.option(
        "--server", "server_url", envvar=config.ENV_SERVER, default=None, metavar="URL",
        callback=_checked_server_url,
        help="Talk to a running system over its HTTP API at URL (env NOETL_STREAM_SERVER) "
             "instead of NATS; takes precedence over --nats-url.")(command)


def fail(code: int, message: str) -> NoReturn:
    click.echo(f"noetl-stream: {message}", err=True)
    sys.exit(code)


def on_stack(nats_url: str | None, prefix: str, name: str, action: Callable[[Bus], Awaitable[T]],
             *, rejected: tuple[type[Exception], ...] = ()) -> T:
    """Open the stack (the embedded nats-server when no URL is given), run `action` on its bus,
    and map errors to exits: the `rejected` kinds exit 2, NATS trouble exits 3.
    """
    from noetl_stream.formats import NewerFormat  # here: pydantic is no part of `--help`
    from noetl_stream.services import open_stack

    async def go() -> T:
        async with open_stack(nats_url, prefix=prefix, name=name) as stack:
            return await action(stack.bus)

    try:
        return asyncio.run(go())
    except rejected as exc:
        fail(EXIT_REJECTED, str(exc))
    except NewerFormat as exc:  # a record a newer release stored: read by that release only
        fail(EXIT_REJECTED, str(exc))
    except InfrastructureError as exc:
        fail(EXIT_INFRA, str(exc))


def run_async(coro: Coroutine[object, object, T]) -> T:
    """Run `coro` on uvloop where it is installed (it is optional off Linux/macOS). SIGTERM
    ends it as Ctrl-C does (KeyboardInterrupt once its cleanup ran), so a command stopped by a
    supervisor also stops the embedded nats-server it started.
    """
    try:
        import uvloop
    except ImportError:
        return asyncio.run(_terminable(coro))
    return uvloop.run(_terminable(coro))


async def _terminable(coro: Coroutine[object, object, T]) -> T:
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    terminated = False

    def on_sigterm() -> None:
        nonlocal terminated
        terminated = True
        if task is not None:
            task.cancel()

    try:
        loop.add_signal_handler(signal.SIGTERM, on_sigterm)
    except (NotImplementedError, RuntimeError, ValueError):  # not the main thread, or no signals
        return await coro
    try:
        return await coro
    except asyncio.CancelledError:
        if terminated:
            raise KeyboardInterrupt from None
        raise
    finally:
        loop.remove_signal_handler(signal.SIGTERM)


def write_stdout(data: bytes) -> None:
    """Write a whole document and a newline to stdout, however slowly the reader drains the pipe.

    A large result written through sys.stdout to a pipe was seen cut short (a partial write that
    was never resumed), so the bytes go out in a loop that resumes partial writes and waits out
    a full pipe.
    """
    data += b"\n"
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        click.echo(data.decode(), nl=False)  # not a real file (a test runner's buffer)
        return
    sys.stdout.flush()
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except BlockingIOError:
            select.select([], [fd], [])
            continue
        view = view[written:]


def _level(verbose: int) -> int:
    return logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG


def setup_logging(verbose: int, fmt: str = "text") -> None:
    from noetl_stream.observe.logfmt import configure

    configure(_level(verbose), fmt)


def verbosity() -> int:
    """How many -v the line holds, wherever they stand (the group counts them: main.py `_Cli`)."""
    root = click.get_current_context().find_root()
    return int(root.params.get("verbose") or 0) + int(root.meta.get("verbose", 0))
