"""`noetl-stream register FILE...`: validate playbooks and put them in the catalog (KV
`noetl_catalog`) under their `metadata.path` (latest, and `metadata.version` when set), with
every child they name by file, so `kind: playbook` tasks can start them by catalog path.

Like `run`, it starts the embedded nats-server of NOETL_STREAM_HOME when no --nats-url is given;
with --server it registers through that server's HTTP API (POST /api/catalog), which cannot read
children named by file, so such a playbook is refused there.
Exit codes: 0 registered, 2 a playbook is invalid (nothing registered), 3 NATS unreachable.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import click

from noetl_stream.cli.common import (
    EXIT_INFRA,
    EXIT_REJECTED,
    fail,
    nats_url_option,
    prefix_option,
    remote_options,
)
from noetl_stream.cli.loading import load_reporting, subscription_reporting
from noetl_stream.dsl.composition import ComposedResult
from noetl_stream.dsl.subscription import STORED as SUBSCRIPTION_STORED
from noetl_stream.dsl.subscription import Subscription
from noetl_stream.errors import InfrastructureError


@click.command()
@click.argument("playbooks", nargs=-1, required=True, type=click.Path(path_type=Path, dir_okay=False))
@nats_url_option
@prefix_option
@remote_options
@click.option("--strict", is_flag=True,
              help="Treat unknown keys and fields without effect as errors.")
def register(playbooks: tuple[Path, ...], nats_url: str | None, prefix: str, server_url: str | None,
             token: str | None, strict: bool) -> None:
    """Validate PLAYBOOKS and register them in the catalog by their metadata.path."""
    from noetl_stream.cli.remote import RemoteError
    from noetl_stream.cli.remote_cmds import refuse_file_children, register_remote
    from noetl_stream.services import open_stack
    from noetl_stream.state.catalog import register_files, register_path, register_subscription

    loaded, subscriptions = _load_all(playbooks, strict)

    if server_url is not None:
        for path, result in loaded:
            refuse_file_children(path, result.files)
        if subscriptions:
            fail(EXIT_REJECTED, f"{subscriptions[0][0]}: a Subscription is registered on the "
                 "catalog directly (without --server); nothing was registered")

    async def go() -> list[str]:
        if server_url is not None:
            return await register_remote(server_url, token, loaded, strict)
        lines = []
        async with open_stack(nats_url, prefix=prefix, name="noetl-stream-register") as stack:
            for path, subscription in subscriptions:
                key = await register_subscription(stack.bus.js, path.read_text(encoding="utf-8"),
                                                  subscription)
                version = f" version {subscription.version}" if subscription.version else ""
                lines.append(f"{path}: registered Subscription {subscription.path}{version} "
                             f"({key}); {SUBSCRIPTION_STORED}")
            for path, result in loaded:
                await register_files(stack.bus.js, result.files)
                root = result.files[0]
                await register_path(stack.bus.js, result.playbook, root.key)
                version = f" version {result.playbook.version}" if result.playbook.version else ""
                lines.append(f"{path}: registered {result.playbook.path}{version} ({root.key}, "
                             f"{len(result.files) - 1} child file(s))")
        return lines

    try:
        for line in asyncio.run(go()):
            click.echo(line)
    except RemoteError as exc:
        fail(exc.exit_code, str(exc))
    except InfrastructureError as exc:
        fail(EXIT_INFRA, str(exc))


def _load_all(playbooks: tuple[Path, ...], strict: bool
              ) -> tuple[list[tuple[Path, ComposedResult]], list[tuple[Path, Subscription]]]:
    """Every playbook (and Subscription document) validated and with a catalog path, or exit 2
    having said what is wrong.
    """
    loaded: list[tuple[Path, ComposedResult]] = []
    subscriptions: list[tuple[Path, Subscription]] = []
    bad = 0
    for path in playbooks:
        subscription = subscription_reporting(path)
        if subscription is not True:
            if not isinstance(subscription, Subscription) or not subscription.path:
                bad += 1
                if subscription is not False:
                    click.echo(f"{path}: metadata.path is required to register a Subscription",
                               err=True)
            else:
                subscriptions.append((path, subscription))
            continue
        result = load_reporting(path, strict=strict)
        if result is None:
            bad += 1
            continue
        if not result.playbook.path:
            bad += 1
            click.echo(f"{path}: metadata.path is required to register a playbook", err=True)
            continue
        loaded.append((path, result))
    if bad:
        fail(EXIT_REJECTED, f"{bad} playbook{'s' if bad != 1 else ''} rejected; nothing was "
              "registered")
    return loaded, subscriptions
