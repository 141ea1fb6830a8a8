"""`noetl-stream credential ...`: manage the encrypted credential store (KV `noetl_credentials`).

Like `run`, these start the embedded nats-server for NOETL_STREAM_HOME when no --nats-url is given,
so a credential set here is what a later `run` in the same home resolves. Exit codes: 0 done,
1 `rotate-key` left credentials it could not read under the old key (named on stderr), 2 bad
input or unknown name, 3 NATS unreachable.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import click

from noetl_stream import config, jsonutil
from noetl_stream.bus.connection import Bus
from noetl_stream.cli.common import (
    EXIT_FAILED,
    EXIT_REJECTED,
    T,
    fail,
    nats_url_option,
    on_stack,
    prefix_option,
)
from noetl_stream.credentials import CredentialScope
from noetl_stream.errors import CredentialError
from noetl_stream.jsonutil import JsonObject, JsonValue
from noetl_stream.state.auth_cache import AuthCache
from noetl_stream.state.credentials import (
    KEEP_SCOPE,
    MATERIAL_MODELS,
    CredentialStore,
    KeepScope,
    mask,
    validate_material,
)
from noetl_stream.state.crypto import SecretBox
from noetl_stream.state.records import Skips


def _with_store(nats_url: str | None, prefix: str,
                action: Callable[[CredentialStore, AuthCache], Awaitable[T]]) -> T:
    """Run `action` on the credential store and the auth cache (cli/common.py `on_stack`)."""
    async def with_stores(bus: Bus) -> T:
        box = SecretBox.from_env(config.home_dir())
        return await action(await CredentialStore.open(bus.js, box),
                            await AuthCache.open(bus.js, box))

    return on_stack(nats_url, prefix, "noetl-stream-credential", with_stores,
                    rejected=(CredentialError,))


def _read_data(raw: str) -> JsonValue:
    source = "--data"
    if raw.startswith("@"):
        path = Path(raw[1:])
        source = str(path)
        try:
            raw = path.read_text()
        except OSError as exc:
            fail(EXIT_REJECTED, f"--data {source}: cannot read: {exc.strerror}")
    try:
        data: JsonValue = jsonutil.loads(raw)
    except ValueError:
        # The text may be the secret: say where the JSON was, not what it said.
        fail(EXIT_REJECTED, f"{source} is not valid JSON (expected an object such as "
                             '\'{"token": "..."}\')')
    return data


@click.group("credential")
def credential() -> None:
    """Store credentials (encrypted at rest) that tasks name with `auth:`.

    \b
      noetl-stream credential set api_token --kind bearer --data '{"token": "..."}'
      noetl-stream credential set pg_local --kind postgres --data @pg.json
      noetl-stream credential list
      noetl-stream credential get api_token [--show-secrets]
      noetl-stream credential rm api_token

    Material is encrypted with NOETL_STREAM_SECRET_KEY, or with the key file
    NOETL_STREAM_HOME/secret.key created on first use.
    """


@credential.command("set")
@click.argument("name")
@click.option("--kind", required=True, metavar="KIND",
              help=f"One of: {', '.join(MATERIAL_MODELS)}.")
@click.option("--data", "data_arg", required=True, metavar="JSON|@FILE",
              help="The material as a JSON object, or @path to a file holding one.")
@click.option("--description", default=None, help="Free text shown by `list`.")
@click.option("--tag", "tags", multiple=True, help="A label shown by `list`. Repeatable.")
@click.option("--playbook", "playbooks", multiple=True, metavar="PATTERN",
              help="Only playbooks whose path (metadata.path, else name) matches PATTERN "
                   "(shell-style: 'etl/*') may use it. Repeatable. Without it, a new credential "
                   "is usable by every playbook and an existing one keeps its scope.")
@click.option("--any-playbook", is_flag=True, help="Remove the scope: every playbook may use it.")
@nats_url_option
@prefix_option
def set_cmd(name: str, kind: str, data_arg: str, description: str | None, tags: tuple[str, ...],
            playbooks: tuple[str, ...], any_playbook: bool, nats_url: str | None,
            prefix: str) -> None:
    """Create or replace credential NAME."""
    if playbooks and any_playbook:
        fail(EXIT_REJECTED, "--playbook and --any-playbook exclude each other")
    scope: CredentialScope | KeepScope | None = KEEP_SCOPE
    if playbooks:
        scope = CredentialScope(playbooks=list(playbooks))
    elif any_playbook:
        scope = None
    data = _read_data(data_arg)
    try:
        validate_material(kind, data)  # before starting anything, so bad input costs nothing
    except CredentialError as exc:
        fail(EXIT_REJECTED, f'credential "{name}": {exc}')

    async def action(store: CredentialStore, cache: AuthCache) -> None:
        await store.set(name, kind, data, description=description, tags=tags, scope=scope)
        await cache.invalidate(name)

    _with_store(nats_url, prefix, action)
    click.echo(f'credential "{name}" ({kind}) saved')


@credential.command("list")
@click.option("--json", "as_json", is_flag=True, help="One JSON array on stdout.")
@nats_url_option
@prefix_option
def list_cmd(as_json: bool, nats_url: str | None, prefix: str) -> None:
    """List credentials: name, kind, description, tags, last update. Never the material."""
    skips = Skips("credential")

    async def action(store: CredentialStore, cache: AuthCache) -> list[dict[str, Any]]:
        return [info.model_dump(mode="json") for info in await store.list(skips)]

    rows = _with_store(nats_url, prefix, action)
    for line in skips.lines():  # the others are listed all the same
        click.echo(f"warning: {line}", err=True)
    if as_json:
        click.echo(jsonutil.dumps_str(rows))
        return
    if not rows:
        click.echo("no credentials")
        return
    click.echo(f"{'NAME':<24} {'KIND':<9} {'UPDATED':<32} {'TAGS':<16} {'PLAYBOOKS':<20} "
               "DESCRIPTION")
    for row in rows:
        tags = ",".join(row["tags"]) or "-"
        scope = row.get("scope")
        playbooks = (",".join(scope["playbooks"]) or "(none)") if scope else "any playbook"
        click.echo(f"{row['name']:<24} {row['kind']:<9} {row['updated_at']:<32} {tags:<16} "
                   f"{playbooks:<20} {row['description'] or ''}".rstrip())


@credential.command("get")
@click.argument("name")
@click.option("--show-secrets", is_flag=True, help="Print the material in clear (masked otherwise).")
@nats_url_option
@prefix_option
def get_cmd(name: str, show_secrets: bool, nats_url: str | None, prefix: str) -> None:
    """Show credential NAME as JSON, its secret fields masked unless --show-secrets."""

    async def action(store: CredentialStore, cache: AuthCache) -> JsonObject | None:
        info = await store.info(name)
        material = await store.get(name)
        if info is None or material is None:
            return None
        data = material.data if show_secrets else mask(material.kind, material.data)
        return {**info.model_dump(mode="json"), "data": data}

    shown = _with_store(nats_url, prefix, action)
    if shown is None:
        fail(EXIT_REJECTED, f'no credential named "{name}"')
    click.echo(jsonutil.dumps_str(shown))


@credential.command("rm")
@click.argument("name")
@nats_url_option
@prefix_option
def rm_cmd(name: str, nats_url: str | None, prefix: str) -> None:
    """Delete credential NAME (and its cached resolutions)."""

    async def action(store: CredentialStore, cache: AuthCache) -> bool:
        removed = await store.delete(name)
        await cache.invalidate(name)
        return removed

    if not _with_store(nats_url, prefix, action):
        fail(EXIT_REJECTED, f'no credential named "{name}"')
    click.echo(f'credential "{name}" removed')


@credential.command("rotate-key")
@nats_url_option
@prefix_option
def rotate_key_cmd(nats_url: str | None, prefix: str) -> None:
    """Re-encrypt every credential with the first configured key; clear the auth cache.

    Put the new key first (NOETL_STREAM_SECRET_KEY="NEW,OLD", or a new first line in
    NOETL_STREAM_HOME/secret.key), run this, then drop the old key.
    """
    skips = Skips("credential")

    async def action(store: CredentialStore, cache: AuthCache) -> int:
        count = await store.rotate_key(skips)
        await cache.clear()
        return count

    count = _with_store(nats_url, prefix, action)
    click.echo(f"re-encrypted {count} credential{'s' if count != 1 else ''}")
    if skips.items:
        # Still under the old key: dropping that key now would lose them for good.
        fail(EXIT_FAILED, f"{len(skips.items)} credential(s) not re-encrypted, keep the old key: "
             + "; ".join(str(item) for item in skips.items))
