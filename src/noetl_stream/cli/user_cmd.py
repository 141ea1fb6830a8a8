"""`noetl-stream user ...` and `noetl-stream apikey ...`: who may call the HTTP API.

Users live in KV `noetl_users` (scrypt password hashes), API keys in `noetl_api_keys` (sha256
digests; a key is shown once, when it is created). Like `credential`, these start the embedded
nats-server of NOETL_STREAM_HOME when no --nats-url is given. Exit codes: 0 done, 2 bad input or
unknown name, 3 NATS unreachable.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable

import click

from noetl_stream import jsonutil
from noetl_stream.bus.connection import Bus
from noetl_stream.cli.common import EXIT_REJECTED, T, fail, nats_url_option, on_stack, prefix_option
from noetl_stream.state.sessions import SessionStore
from noetl_stream.state.users import ROLES, AccountError, ApiKeyInfo, ApiKeyStore, UserInfo, UserStore

role_option = click.option("--role", "roles", multiple=True, required=True,
                           type=click.Choice(ROLES), help="A role. Repeatable.")


def _with_stores(nats_url: str | None, prefix: str,
                 action: Callable[[UserStore, ApiKeyStore], Awaitable[T]]) -> T:
    """Run `action` on the user and API key stores (cli/common.py `on_stack`)."""
    async def with_stores(bus: Bus) -> T:
        return await action(await UserStore.open(bus.js), await ApiKeyStore.open(bus.js))

    return on_stack(nats_url, prefix, "noetl-stream-user", with_stores, rejected=(AccountError,))


@click.group("user")
def user() -> None:
    """Users of the HTTP API (`server --http`).

    \b
      noetl-stream user add alice --role admin            (prompts for the password)
      printf %s "$PW" | noetl-stream user add ci --role operator --password-stdin
      noetl-stream user list
      noetl-stream user rm alice

    Roles: admin (everything), operator (run, cancel, signal, register, write vars, read),
    viewer (read), worker (read, and credentials with their material).
    """


@user.command("add")
@click.argument("name")
@role_option
@click.option("--password-stdin", is_flag=True, help="Read the password from stdin.")
@click.option("--no-password", is_flag=True, help="No password: the user logs in by API key only.")
@nats_url_option
@prefix_option
def user_add(name: str, roles: tuple[str, ...], password_stdin: bool, no_password: bool,
             nats_url: str | None, prefix: str) -> None:
    """Create user NAME with ROLES."""
    password: str | None = None
    if password_stdin:
        password = sys.stdin.read().rstrip("\r\n")
    elif not no_password:
        password = click.prompt("password", hide_input=True, confirmation_prompt=True)
    if password is not None and not password:
        fail(EXIT_REJECTED, "the password is empty")

    async def action(users: UserStore, keys: ApiKeyStore) -> None:
        await users.add(name, roles, password)

    _with_stores(nats_url, prefix, action)
    click.echo(f'user "{name}" added ({", ".join(sorted(set(roles)))})')


@user.command("list")
@click.option("--json", "as_json", is_flag=True, help="One JSON array on stdout.")
@nats_url_option
@prefix_option
def user_list(as_json: bool, nats_url: str | None, prefix: str) -> None:
    """List users and their roles."""

    async def action(users: UserStore, keys: ApiKeyStore) -> list[UserInfo]:
        return await users.list()

    rows = _with_stores(nats_url, prefix, action)
    if as_json:
        click.echo(jsonutil.dumps_str([r.model_dump(mode="json") for r in rows]))
        return
    if not rows:
        click.echo("no users")
        return
    click.echo(f"{'NAME':<24} {'ROLES':<24} CREATED")
    for row in rows:
        click.echo(f"{row.name:<24} {','.join(row.roles):<24} {row.created_at.isoformat()}")


@user.command("rm")
@click.argument("name")
@nats_url_option
@prefix_option
def user_rm(name: str, nats_url: str | None, prefix: str) -> None:
    """Remove user NAME; their sessions and API keys stop working at once, for good (a user
    added again under the same name does not get them back).
    """

    async def action(bus: Bus) -> bool:
        users, keys = await UserStore.open(bus.js), await ApiKeyStore.open(bus.js)
        removed = await users.remove(name)
        for key in await keys.list(user=name):
            await keys.remove(key.key_id)
        await (await SessionStore.open(bus.js)).end_user(name)
        return removed

    if not on_stack(nats_url, prefix, "noetl-stream-user", action, rejected=(AccountError,)):
        fail(EXIT_REJECTED, f'no user named "{name}"')
    click.echo(f'user "{name}" removed')


@click.group("apikey")
def apikey() -> None:
    """API keys for programs calling the HTTP API (`Authorization: Bearer <key>`).

    \b
      noetl-stream apikey create --user ci --role operator
      noetl-stream apikey list
      noetl-stream apikey rm KEY_ID
    """


@apikey.command("create")
@click.option("--user", "user_name", required=True, help="The user the key acts as.")
@role_option
@click.option("--description", default=None, help="Free text shown by `list`.")
@nats_url_option
@prefix_option
def apikey_create(user_name: str, roles: tuple[str, ...], description: str | None,
                  nats_url: str | None, prefix: str) -> None:
    """Create a key for USER with ROLES; prints the key once (only its digest is stored)."""

    async def action(users: UserStore, keys: ApiKeyStore) -> tuple[str, str]:
        record = await users.get(user_name)
        if record is None:
            raise AccountError(f'no user named "{user_name}"; add it with `noetl-stream user add`')
        key, info = await keys.create(user_name, roles, description=description,
                                      user_since=record.created_at)
        return key, info.key_id

    key, key_id = _with_stores(nats_url, prefix, action)
    click.echo(f"key id {key_id}; the key is shown only now:", err=True)
    click.echo(key)


@apikey.command("list")
@click.option("--user", "user_name", default=None, help="Only this user's keys.")
@click.option("--json", "as_json", is_flag=True, help="One JSON array on stdout.")
@nats_url_option
@prefix_option
def apikey_list(user_name: str | None, as_json: bool, nats_url: str | None, prefix: str) -> None:
    """List API keys by id (never the keys themselves)."""

    async def action(users: UserStore, keys: ApiKeyStore) -> list[ApiKeyInfo]:
        return await keys.list(user=user_name)

    rows = _with_stores(nats_url, prefix, action)
    if as_json:
        click.echo(jsonutil.dumps_str([r.model_dump(mode="json") for r in rows]))
        return
    if not rows:
        click.echo("no API keys")
        return
    width = max(len(row.key_id) for row in rows)
    click.echo(f"{'ID':<{width}}  {'USER':<16} {'ROLES':<20} DESCRIPTION")
    for row in rows:
        click.echo(f"{row.key_id:<{width}}  {row.user:<16} {','.join(row.roles):<20} "
                   f"{row.description or ''}".rstrip())


@apikey.command("rm")
@click.argument("key_id")
@nats_url_option
@prefix_option
def apikey_rm(key_id: str, nats_url: str | None, prefix: str) -> None:
    """Revoke the API key KEY_ID."""

    async def action(users: UserStore, keys: ApiKeyStore) -> bool:
        return await keys.remove(key_id)

    if not _with_stores(nats_url, prefix, action):
        fail(EXIT_REJECTED, f'no API key with id "{key_id}"')
    click.echo(f"API key {key_id} revoked")
