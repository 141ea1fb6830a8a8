"""What every command shares: exit codes (the conformance contract), options, failing, running."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Coroutine
from typing import Any, NoReturn, TypeVar

import click

from noetl_stream import config

# 0 completed, 1 failed or cancelled, 2 rejected input or usage error (nothing runs),
# 3 infrastructure error; `run` interrupted with Ctrl-C exits 130 (cli/main.py).
EXIT_OK, EXIT_FAILED, EXIT_REJECTED, EXIT_INFRA = 0, 1, 2, 3

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])



def _checked_nats_url(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A malformed URL is a usage error said in one line, before anything connects."""
    from noetl_stream.runtime.connection import check_nats_url

    if value is None:
        return None
    try:
        return check_nats_url(value)
    except ValueError as exc:
        fail(EXIT_REJECTED, str(exc))


nats_url_option = click.option(
    "--nats-url", envvar=config.ENV_NATS_URL, default=None, metavar="URL",
    callback=_checked_nats_url,
    help="NATS server with JetStream (env NOETL_STREAM_NATS_URL). Without it, the embedded "
         "nats-server of NOETL_STREAM_HOME is started (or reused when it already runs).")
prefix_option = click.option("--prefix", envvar=config.ENV_PREFIX, default="noetl", show_default=True,
                             help="Subject prefix (env NOETL_STREAM_PREFIX).")


def remote_options(command: F) -> F:
    """`--server URL` and `--token TOKEN`, the same on every command that can work remotely:
    given a server, the command talks to its HTTP API (cli/remote.py) and never to NATS.
    """
    command = click.option(
        "--token", envvar=config.ENV_TOKEN, default=None, metavar="TOKEN",
        help="Session token or API key for --server (env NOETL_STREAM_TOKEN).")(command)
    return click.option(
        "--server", "server_url", envvar=config.ENV_SERVER, default=None, metavar="URL",
        help="Talk to a running system over its HTTP API at URL (env NOETL_STREAM_SERVER) "
             "instead of NATS; takes precedence over --nats-url.")(command)


def fail(code: int, message: str) -> NoReturn:
    click.echo(f"noetl-stream: {message}", err=True)
    sys.exit(code)


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` on uvloop where it is installed (it is optional off Linux/macOS)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)
