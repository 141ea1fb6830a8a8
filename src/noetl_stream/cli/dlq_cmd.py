"""`noetl-stream dlq list|show|purge`: look at and clear the commands kept in `NOETL_DLQ`
(bus/dead_letters.py says how they get there).

Exit codes: 0 done, 2 bad input or no such dead letter, 3 NATS unreachable or no DLQ stream.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

import click
import orjson
from nats.errors import Error as NatsError

from noetl_stream import jsonutil
from noetl_stream.cli.common import (
    EXIT_INFRA,
    EXIT_REJECTED,
    fail,
    nats_url_option,
    prefix_option,
    run_async,
)
from noetl_stream.errors import InfrastructureError
from noetl_stream.jsonutil import JsonValue

if TYPE_CHECKING:
    from noetl_stream.bus.connection import Bus

T = TypeVar("T")


def _on_bus(nats_url: str | None, prefix: str, action: Callable[[Bus], Awaitable[T]]) -> T:
    """Run `action(bus)` on `nats_url`, or on the embedded nats-server when it is None."""
    from noetl_stream.services import client_bus

    async def go() -> T:
        async with client_bus(nats_url, prefix=prefix, name="noetl-stream-dlq") as bus:
            return await action(bus)

    try:
        return run_async(go())
    except (InfrastructureError, NatsError, TimeoutError) as exc:
        fail(EXIT_INFRA, f"dead letters not reachable: {exc or type(exc).__name__}")


@click.group("dlq")
def dlq() -> None:
    """Dead letters: commands no worker finished after every delivery, or could not read."""


@dlq.command("list")
@nats_url_option
@prefix_option
@click.option("--json", "as_json", is_flag=True, help="Print each dead letter as one JSON line.")
@click.option("--limit", default=50, show_default=True, help="Show the newest N.")
def list_cmd(nats_url: str | None, prefix: str, as_json: bool, limit: int) -> None:
    """List dead letters, oldest of the newest LIMIT first."""
    from noetl_stream.bus.dead_letters import list_dead_letters

    letters = _on_bus(nats_url, prefix, lambda bus: list_dead_letters(bus, limit=limit))
    if as_json:
        for letter in letters:
            click.echo(jsonutil.dumps_str(letter.summary()))
        return
    if not letters:
        click.echo("no dead letters")
        return
    click.echo(f"{'SEQ':>6}  {'TIME':<29} {'EXECUTION':<22} {'STEP':<20} {'DELIV':>5}  "
               f"{'REASON':<15} SUBJECT")
    for d in letters:
        step = (d.step or "-") + (f"[{d.iteration}]" if d.iteration is not None else "")
        click.echo(f"{d.seq:>6}  {d.time:<29} {d.execution_id or '-':<22} {step:<20} "
                   f"{d.deliveries if d.deliveries is not None else '-':>5}  {d.reason:<15} "
                   f"{d.subject}")


@dlq.command("show")
@click.argument("seq", type=int)
@nats_url_option
@prefix_option
def show(seq: int, nats_url: str | None, prefix: str) -> None:
    """Print dead letter SEQ in full: what happened to it and the command itself, as JSON."""
    from noetl_stream.bus.dead_letters import read_dead_letter

    letter = _on_bus(nats_url, prefix, lambda bus: read_dead_letter(bus, seq))
    if letter is None:
        fail(EXIT_REJECTED, f"no dead letter {seq}")
    try:
        command: JsonValue = jsonutil.loads(letter.data)
    except ValueError:
        command = letter.data.decode(errors="replace")  # an unreadable command, shown as text
    full = {**letter.summary(), "command": command}
    click.echo(orjson.dumps(full, default=str, option=orjson.OPT_INDENT_2).decode())


@dlq.command("purge")
@click.argument("seq", type=int, required=False)
@click.option("--all", "purge_all", is_flag=True, help="Remove every dead letter.")
@nats_url_option
@prefix_option
def purge(seq: int | None, purge_all: bool, nats_url: str | None, prefix: str) -> None:
    """Remove dead letter SEQ, or all of them with --all."""
    from noetl_stream.bus.dead_letters import purge_dead_letters

    if (seq is None) == (not purge_all):
        fail(EXIT_REJECTED, "give a dead letter's SEQ or --all, not both")
    removed = _on_bus(nats_url, prefix, lambda bus: purge_dead_letters(bus, seq))
    if seq is not None and removed == 0:
        fail(EXIT_REJECTED, f"no dead letter {seq}")
    click.echo(f"removed {removed} dead letter{'s' if removed != 1 else ''}")
