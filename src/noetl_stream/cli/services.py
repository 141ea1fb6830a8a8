"""What the long-running commands share: HOST:PORT options, waiting for a signal, the HTTP API
and metrics endpoints they may serve, and how the embedded nats-server is announced.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import click

from noetl_stream.cli.common import EXIT_REJECTED, fail, setup_logging, verbosity

if TYPE_CHECKING:
    from noetl_stream.bus.connection import Bus
    from noetl_stream.bus.nats_server import NatsServer

metrics_option = click.option(
    "--metrics", default=None, metavar="HOST:PORT",
    help="Serve Prometheus /metrics there, without authentication (a server adds /health).")
log_format_option = click.option(
    "--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True,
    envvar="NOETL_STREAM_LOG_FORMAT",
    help="Log lines on stderr as text or as one JSON object per line (env NOETL_STREAM_LOG_FORMAT).")


def http_address(text: str, option: str = "--http") -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        fail(EXIT_REJECTED, f"{option} expects HOST:PORT, got {text!r}")
    return host or "127.0.0.1", int(port)


async def serve_forever(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    await stop.wait()


def announce(nats: NatsServer) -> None:
    from noetl_stream.bus.nats_server import binary_version

    if nats.binary is None:
        click.echo(f"using the running nats-server at {nats.url} (store {nats.store_dir})", err=True)
        return
    click.echo(f"embedded {binary_version(nats.binary)} at {nats.url} (binary {nats.binary}, "
               f"store {nats.store_dir})", err=True)


def service_setup(service: str, log_format: str) -> None:
    """Logging in the chosen format, and tracing when OTEL_* (or the test exporter) asks for it."""
    from noetl_stream.observe import tracing

    setup_logging(verbosity(), log_format)
    tracing.setup(service)


@contextlib.asynccontextmanager
async def metrics_endpoint(bus: Bus, address: tuple[str, int] | None, *,
                            cluster: bool) -> AsyncIterator[None]:
    if address is None:
        yield
        return
    from noetl_stream.metrics_endpoint import serve_metrics

    async with serve_metrics(address[0], address[1], bus=bus, cluster=cluster) as url:
        click.echo(f"metrics at {url}/metrics (no authentication)", err=True)
        yield


@contextlib.asynccontextmanager
async def http_api(bus: Bus, address: tuple[str, int] | None, *, auth: bool,
                    cors_origin: str | None) -> AsyncIterator[None]:
    if address is None:
        yield
        return
    from noetl_stream.api import serve

    if not auth:
        click.echo("WARNING: the HTTP API runs WITHOUT AUTHENTICATION (--no-auth): anyone who "
                   "reaches it is an admin and can read credentials", err=True)
    # A port it cannot bind is an InfrastructureError naming the address (http_site.py).
    async with serve(bus, host=address[0], port=address[1], auth=auth,
                     cors_origin=cors_origin) as url:
        click.echo(f"HTTP API at {url} (docs/api.md)", err=True)
        yield
