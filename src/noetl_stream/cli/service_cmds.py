"""`noetl-stream server`, `worker`, `init` and `nats`: the long-running services and provisioning."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import TYPE_CHECKING

import click

from noetl_stream import config
from noetl_stream.cli.common import (
    EXIT_FAILED,
    EXIT_INFRA,
    fail,
    nats_url_option,
    prefix_option,
    refuse_unless_token,
    run_async,
)
from noetl_stream.cli.services import (
    announce,
    http_address,
    http_api,
    log_format_option,
    metrics_endpoint,
    metrics_option,
    serve_forever,
    service_setup,
)
from noetl_stream.collector import freeze_start_up
from noetl_stream.errors import InfrastructureError

if TYPE_CHECKING:
    from noetl_stream.bus.connection import Bus

log = logging.getLogger("noetl_stream.services")


def _checked_pools(ctx: click.Context, param: click.Parameter,
                   value: str | tuple[str, ...]) -> str | tuple[str, ...]:
    """A pool name is one subject token: another is a usage error said in one line, before
    anything connects (NATS would refuse its consumer name with a traceback).
    """
    for pool in (value,) if isinstance(value, str) else value:
        refuse_unless_token(pool, f"--pool {pool!r}", "a pool name")
    return value


@click.command()
@nats_url_option
@prefix_option
@click.option("--http", "http", default=None, metavar="HOST:PORT",
              help="Also serve the HTTP API there (docs/api.md), e.g. 127.0.0.1:8082.")
@click.option("--no-auth", is_flag=True, help="HTTP API without authentication: every caller is "
              "an admin. Only for a machine nobody else can reach.")
@click.option("--cors-origin", default=None, metavar="ORIGIN",
              help="Send CORS headers allowing this origin (none by default).")
@metrics_option
@log_format_option
def server(nats_url: str | None, prefix: str, http: str | None, no_auth: bool,
           cors_origin: str | None, metrics: str | None, log_format: str) -> None:
    """Run the server: consume execution requests and outcome events, route, publish commands."""
    from noetl_stream.services import run_services

    service_setup("noetl-stream-server", log_format)
    address = http_address(http) if http else None
    metrics_address = http_address(metrics, "--metrics") if metrics else None

    @contextlib.asynccontextmanager
    async def services(bus: Bus) -> AsyncIterator[None]:
        async with run_services(bus, server=True, worker=False), \
                metrics_endpoint(bus, metrics_address, cluster=True), \
                http_api(bus, address, auth=not no_auth, cors_origin=cors_origin):
            yield

    _serve("noetl-stream-server", nats_url, prefix, ("default",), services,
           "server running; Ctrl-C stops it")


@click.command()
@nats_url_option
@prefix_option
@click.option("--pool", default="default", show_default=True, callback=_checked_pools,
              help="Worker pool to take commands from.")
@click.option("--concurrency", default=64, show_default=True, help="Commands run at once.")
@click.option("--python-processes", default=8, show_default=True, help="Python steps run at once.")
@click.option("--python-idle", type=click.FloatRange(min=0, min_open=True), default=None,
              metavar="SECONDS", help="A python interpreter without a step this long retires "
              "[default: $NOETL_STREAM_PYTHON_IDLE_S, else 10].")
@metrics_option
@log_format_option
def worker(nats_url: str | None, prefix: str, pool: str, concurrency: int, python_processes: int,
           python_idle: float | None, metrics: str | None, log_format: str) -> None:
    """Run a worker: pull commands of POOL, run their task pipelines, publish outcomes."""
    from noetl_stream.services import run_services

    name = f"noetl-stream-worker-{pool}"
    service_setup(name, log_format)
    metrics_address = http_address(metrics, "--metrics") if metrics else None

    @contextlib.asynccontextmanager
    async def services(bus: Bus) -> AsyncIterator[None]:
        async with run_services(bus, server=False, worker=True, pool=pool,
                                concurrency=concurrency, python_children=python_processes,
                                python_idle_s=python_idle), \
                metrics_endpoint(bus, metrics_address, cluster=False):
            yield

    _serve(name, nats_url, prefix, (pool,), services,
           f"worker running on pool {pool!r}; Ctrl-C stops it")


def _serve(name: str, nats_url: str | None, prefix: str, pools: tuple[str, ...],
           services: Callable[[Bus], AbstractAsyncContextManager[None]], running: str) -> None:
    """Open the stack (the embedded nats-server when no URL is given), run `services` on its
    bus until Ctrl-C, and exit EXIT_INFRA when NATS or the stack cannot be had.
    """
    from noetl_stream.services import open_stack

    async def go() -> None:
        async with open_stack(nats_url, prefix=prefix, pools=pools, name=name,
                              on_embedded=announce) as stack, services(stack.bus):
            # What start-up made lives as long as the process: out of every later collection.
            frozen = freeze_start_up()
            log.debug("start-up done: %d objects frozen out of garbage collection", frozen)
            click.echo(running, err=True)
            await serve_forever(asyncio.Event())

    try:
        run_async(go())
    except InfrastructureError as exc:
        fail(EXIT_INFRA, str(exc))


@click.command()
@nats_url_option
@prefix_option
@click.option("--pool", "pools", multiple=True, default=("default",), show_default=True,
              callback=_checked_pools,
              help="Worker pools to create consumers for. Repeatable.")
@click.option("--replicas", type=click.IntRange(1, 5), default=None, envvar=config.ENV_REPLICAS,
              help="JetStream replicas of streams, buckets and object stores (3 in a cluster); "
                   "unset, existing ones keep theirs.")
def init(nats_url: str | None, prefix: str, pools: tuple[str, ...], replicas: int | None) -> None:
    """Provision streams, consumers and KV buckets (idempotent); report drift."""
    from noetl_stream.bus.connection import connect
    from noetl_stream.bus.nats_server import start_nats_server
    from noetl_stream.bus.provision import provision

    async def go() -> list[str]:
        url = nats_url
        nats = None
        if url is None:
            nats = await start_nats_server(config.home_dir() / "nats")
            url = nats.url
        try:
            bus = await connect(url, prefix=prefix)
            try:
                return (await provision(bus, pools, replicas=replicas)).lines()
            finally:
                await bus.close()
        finally:
            if nats is not None:
                await nats.stop()

    try:
        lines = run_async(go())
    except InfrastructureError as exc:
        fail(EXIT_INFRA, str(exc))
    for line in lines:
        click.echo(line)
    if any(line.startswith("DRIFT") for line in lines):
        sys.exit(EXIT_FAILED)


@click.command("nats")
@click.option("--port", type=click.IntRange(1, 65535), default=None,
              help="Client port (default: a free one, recorded in the store folder).")
@click.option("--store", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="Folder of the server's config, log and JetStream store "
                   "[default: $NOETL_STREAM_HOME/nats].")
def nats_cmd(port: int | None, store: Path | None) -> None:
    """Run the embedded nats-server in the foreground (store under NOETL_STREAM_HOME)."""
    from noetl_stream.bus.nats_server import binary_version, start_nats_server

    async def go() -> None:
        srv = await start_nats_server(store or config.home_dir() / "nats", port=port)
        if not srv.owned:
            click.echo(f"a nats-server for this home is already running at {srv.url}", err=True)
            return
        click.echo(f"{binary_version(srv.binary) if srv.binary else 'nats-server'} at {srv.url} "
                   f"(binary {srv.binary}, store {srv.store_dir}); Ctrl-C stops it", err=True)
        try:
            await serve_forever(asyncio.Event())
        finally:
            await srv.stop()

    try:
        run_async(go())
    except InfrastructureError as exc:
        fail(EXIT_INFRA, str(exc))
