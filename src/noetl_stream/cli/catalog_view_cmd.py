"""`noetl-stream catalog list` and `catalog show PATH`: what `register` (or POST /api/catalog)
put in the catalog, read from KV `noetl_catalog`, or over the HTTP API with --server.

Exit codes: 0 shown, 2 no such path or version, 3 NATS or the server unreachable.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import quote

import click

from noetl_stream import jsonutil
from noetl_stream.cli.common import (
    EXIT_INFRA,
    EXIT_REJECTED,
    fail,
    nats_url_option,
    prefix_option,
    remote_options,
    run_async,
)
from noetl_stream.errors import InfrastructureError, PlaybookError

if TYPE_CHECKING:
    from noetl_stream.api.models import CatalogPath

T = TypeVar("T")


@click.group("catalog")
def catalog() -> None:
    """Registered playbooks: `catalog list`, `catalog show PATH` (`register FILE` adds them)."""


@catalog.command("list")
@click.option("--json", "as_json", is_flag=True, help="One JSON document: a list of paths.")
@nats_url_option
@prefix_option
@remote_options
def list_catalog(as_json: bool, nats_url: str | None, prefix: str, server_url: str | None,
                 token: str | None) -> None:
    """List registered paths with the playbook id of `latest` and their versions."""
    items = _call(_list(nats_url, prefix, server_url, token))
    if as_json:
        click.echo(jsonutil.dumps_str([item.model_dump(mode="json") for item in items]))
        return
    if not items:
        click.echo("no playbooks registered (`noetl-stream register FILE` adds one)")
        return
    width = max([len("PATH"), *(len(i.path) for i in items)])
    click.echo(f"{'PATH':<{width}}  {'LATEST':<35}  VERSIONS")
    for item in items:
        versions = ", ".join(sorted(item.versions)) or "-"
        click.echo(f"{item.path:<{width}}  {item.latest or '-':<35}  {versions}")


@catalog.command("show")
@click.argument("path")
@click.option("--version", default=None, help="A registered version (default: latest).")
@nats_url_option
@prefix_option
@remote_options
def show(path: str, version: str | None, nats_url: str | None, prefix: str,
         server_url: str | None, token: str | None) -> None:
    """Print the YAML text registered under PATH."""
    found = _call(fetch_text(path, version, nats_url=nats_url, prefix=prefix,
                             server_url=server_url, token=token))
    if found is None:
        fail(EXIT_REJECTED, not_registered(path, version))
    click.echo(found.rstrip("\n"))


def not_registered(path: str, version: str | None) -> str:
    shown = f'"{path}"' + (f' version "{version}"' if version else "")
    return f"playbook {shown} is not in the catalog (`noetl-stream catalog list` shows what is)"


async def fetch_text(path: str, version: str | None, *, nats_url: str | None, prefix: str,
                     server_url: str | None, token: str | None) -> str | None:
    """The text registered under `path` (latest, or `version`), or None."""
    if server_url is not None:
        from noetl_stream.api.models import CatalogPlaybook
        from noetl_stream.cli.remote import RemoteError, open_client

        query = f"?version={quote(version)}" if version else ""
        async with open_client(server_url, token) as client:
            try:
                answer = await client.answer(CatalogPlaybook, "GET",
                                             f"/api/catalog/{quote(path.strip('/'))}{query}")
            except RemoteError as exc:
                if exc.status == 404:
                    return None
                raise
        return answer.content
    from noetl_stream.services import client_bus
    from noetl_stream.state.catalog import read_path

    async with client_bus(nats_url, prefix=prefix, name="noetl-stream-catalog") as bus:
        found = await read_path(bus.js, path, version)
    return found[0] if found else None


async def _list(nats_url: str | None, prefix: str, server_url: str | None,
                token: str | None) -> list[CatalogPath]:
    if server_url is not None:
        from noetl_stream.api.models import CatalogList
        from noetl_stream.cli.remote import open_client

        async with open_client(server_url, token) as client:
            answer = await client.answer(CatalogList, "GET", "/api/catalog")
        return answer.items
    from noetl_stream.api.models import CatalogPath
    from noetl_stream.services import client_bus
    from noetl_stream.state.catalog import list_paths, read_entry

    async with client_bus(nats_url, prefix=prefix, name="noetl-stream-catalog") as bus:
        async def describe(key: str) -> tuple[str | None, str | None]:
            from noetl_stream.dsl import parse_playbook
            from noetl_stream.tools.registry import installed_kinds

            text = await read_entry(bus.js, key)
            try:
                playbook = parse_playbook(text or "", key, kinds=installed_kinds()).playbook
            except PlaybookError:
                return None, None
            return playbook.path, playbook.version

        paths = await list_paths(bus.js, describe)
    return [CatalogPath(path=p.path, latest=p.latest, versions=p.versions) for p in paths]


def _call(coro: Coroutine[object, object, T]) -> T:
    from noetl_stream.cli.remote import RemoteError

    try:
        return run_async(coro)
    except RemoteError as exc:
        fail(exc.exit_code, str(exc))
    except InfrastructureError as exc:
        fail(EXIT_INFRA, str(exc))
