"""`noetl-stream backup DIR` and `noetl-stream restore DIR`: every stream, KV bucket and object
store of noetl-stream, with its durable consumers, through the JetStream API
(server/backup.py; docs/deploy.md says when to run them).

Exit codes: 0 done, 2 bad input (DIR not a backup, or the target already has the streams),
3 NATS unreachable or refusing.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import click
from nats.errors import Error as NatsError

from noetl_stream import config
from noetl_stream.bus.connection import Bus
from noetl_stream.cli.common import EXIT_INFRA, EXIT_REJECTED, fail, nats_url_option, prefix_option, run_async
from noetl_stream.errors import InfrastructureError
from noetl_stream.server.backup import StreamCopy


@contextlib.asynccontextmanager
async def _unprovisioned_bus(nats_url: str | None, prefix: str) -> AsyncIterator[Bus]:
    """A plain connection, to the embedded nats-server when no URL is given; never provisions
    (a restore needs a NATS without the streams).
    """
    from noetl_stream.bus.connection import connect
    from noetl_stream.bus.nats_server import start_nats_server

    nats = None
    if nats_url is None:
        nats = await start_nats_server(config.home_dir() / "nats")
        nats_url = nats.url
    try:
        bus = await connect(nats_url, prefix=prefix, name="noetl-stream-backup")
        try:
            yield bus
        finally:
            await bus.close()
    finally:
        if nats is not None:
            await nats.stop()


def _report(copy: StreamCopy) -> None:
    click.echo(f"{copy.name:<24} {copy.messages:>9} {copy.consumers:>9}")


@click.command("backup")
@click.argument("folder", type=click.Path(path_type=Path, file_okay=False))
@nats_url_option
@prefix_option
def backup(folder: Path, nats_url: str | None, prefix: str) -> None:
    """Copy every stream, KV bucket and object store of noetl-stream into FOLDER."""
    from noetl_stream.server.backup import backup as run_backup

    if folder.exists() and any(folder.iterdir()):
        fail(EXIT_REJECTED, f"{folder} is not empty; back up into a new folder")

    async def go() -> list[StreamCopy]:
        async with _unprovisioned_bus(nats_url, prefix) as bus:
            click.echo(f"{'STREAM':<24} {'MESSAGES':>9} {'CONSUMERS':>9}")
            return await run_backup(bus, folder, on_stream=_report)

    try:
        copies = run_async(go())
    except (InfrastructureError, NatsError, TimeoutError) as exc:
        fail(EXIT_INFRA, f"backup failed: {exc or type(exc).__name__}")
    click.echo(f"backed up {len(copies)} streams into {folder}", err=True)


@click.command("restore")
@click.argument("folder", type=click.Path(path_type=Path, file_okay=False, exists=True))
@click.option("--replicas", type=click.IntRange(1, 5), default=None,
              help="Replicas of the restored streams (default: as backed up).")
@nats_url_option
@prefix_option
def restore(folder: Path, replicas: int | None, nats_url: str | None, prefix: str) -> None:
    """Recreate the streams, buckets and object stores backed up in FOLDER on a NATS without them."""
    from noetl_stream.server.backup import restore as run_restore

    if not (folder / "manifest.json").is_file():
        fail(EXIT_REJECTED, f"{folder} holds no manifest.json: not a backup")

    async def go() -> list[StreamCopy]:
        async with _unprovisioned_bus(nats_url, prefix) as bus:
            click.echo(f"{'STREAM':<24} {'MESSAGES':>9} {'CONSUMERS':>9}")
            return await run_restore(bus, folder, replicas=replicas, on_stream=_report)

    try:
        copies = run_async(go())
    except ValueError as exc:
        fail(EXIT_REJECTED, str(exc))
    except (InfrastructureError, NatsError, TimeoutError) as exc:
        fail(EXIT_INFRA, f"restore failed: {exc or type(exc).__name__}")
    click.echo(f"restored {len(copies)} streams from {folder}", err=True)
