"""`noetl-stream trigger apply|list|show|pause|resume|fire|backfill|delete`: triggers that start
executions on a schedule or on messages (docs/triggers.md); the servers run them.

Like `register`, each starts the embedded nats-server of NOETL_STREAM_HOME when no --nats-url
is given. Exit codes: 0 done, 1 a `fire` that started no execution, 2 an invalid document, an
unregistered playbook or no such trigger, 3 NATS unreachable.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
from nats.errors import Error as NatsError

from noetl_stream import jsonutil
from noetl_stream.cli.common import (
    EXIT_FAILED,
    EXIT_INFRA,
    EXIT_REJECTED,
    fail,
    nats_url_option,
    on_stack,
    prefix_option,
    refuse_unless_token,
)
from noetl_stream.errors import CatalogError, PlaybookError, YamlSyntaxError
from noetl_stream.triggers.document import parse_trigger

if TYPE_CHECKING:
    from noetl_stream.bus.connection import Bus

T = TypeVar("T")


def _on_bus(nats_url: str | None, prefix: str, action: Callable[[Bus], Awaitable[T]]) -> T:
    from noetl_stream.server.trigger_ops import ScheduleRefused, TriggerNotFound
    from noetl_stream.triggers.cron import ScheduleError

    try:
        return on_stack(nats_url, prefix, "noetl-stream-trigger", action,
                        rejected=(CatalogError, TriggerNotFound, ScheduleRefused, ScheduleError))
    except (NatsError, TimeoutError) as exc:
        fail(EXIT_INFRA, f"NATS: {exc or type(exc).__name__}")


def _checked_name(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """A name no trigger can have is refused in one line before NATS is asked."""
    refuse_unless_token(value, f"no trigger named {value!r}", "a trigger's name")
    return value


def check_trigger_file(path: Path) -> bool:
    """`validate` of a trigger document: print ok or every problem; whether it is valid."""
    from noetl_stream.server.trigger_ops import describe_source

    try:
        doc = parse_trigger(path.read_text(), str(path))
    except PlaybookError as exc:
        for issue in exc.issues:
            click.echo(str(issue), err=True)
        return False
    except YamlSyntaxError as exc:
        click.echo(f"{path}:{exc.line or 1}: {exc}", err=True)
        return False
    click.echo(f"{path}: ok (trigger {doc.name}: {describe_source(doc)} -> {doc.spec.playbook})")
    return True


@click.group()
def trigger() -> None:
    """Start executions on a schedule or on messages."""


@trigger.command("apply")
@click.argument("file", type=click.Path(path_type=Path, dir_okay=False))
@nats_url_option
@prefix_option
def apply_cmd(file: Path, nats_url: str | None, prefix: str) -> None:
    """Create or change the trigger FILE describes (kind: Trigger, or a NoETL Subscription
    whose form maps onto one).
    """
    from noetl_stream.server import trigger_ops
    from noetl_stream.triggers.subscription_map import document_trigger

    try:
        text = file.read_text()
    except OSError as exc:
        fail(EXIT_REJECTED, f"{file}: {exc.strerror or exc}")
    try:
        doc, warnings = document_trigger(text, str(file))
    except PlaybookError as exc:
        for issue in exc.issues:
            click.echo(str(issue), err=True)
        fail(EXIT_REJECTED, f"{file}: rejected; nothing was applied")
    except YamlSyntaxError as exc:
        fail(EXIT_REJECTED, f"{file}:{exc.line or 1}: {exc}")
    for warning in warnings:
        click.echo(f"{file}: {warning}", err=True)
    record, new = _on_bus(nats_url, prefix, lambda bus: trigger_ops.apply(bus, doc, text))
    click.echo(f"trigger {doc.name} {'created' if new else 'updated'} ({record.state}): "
               f"{trigger_ops.describe_source(doc)} -> {doc.spec.playbook}")


@trigger.command("list")
@nats_url_option
@prefix_option
@click.option("--json", "as_json", is_flag=True, help="One JSON document.")
def list_cmd(nats_url: str | None, prefix: str, as_json: bool) -> None:
    """Every trigger: state, source, next fire time when known, last execution."""
    from noetl_stream.server import trigger_ops

    rows = _on_bus(nats_url, prefix, trigger_ops.listing)
    if as_json:
        click.echo(jsonutil.dumps(rows).decode())
        return
    if not rows:
        click.echo("no triggers (`noetl-stream trigger apply FILE` adds one)")
        return
    for line in list_table(rows):
        click.echo(line)


def list_table(rows: list[dict[str, Any]]) -> list[str]:
    """A header row and one row per trigger, columns padded to their widest cell."""
    cells = [("NAME", "STATE", "SOURCE", "PLAYBOOK", "NEXT FIRE", "LAST EXECUTION", "STATUS",
              "FIRED AT")]
    for row in rows:
        last = row["last_execution"] or {}
        cells.append((row["name"], row["state"], row["source"], row["playbook"],
                      row["next_fire"] or "-", last.get("execution_id") or "-",
                      last.get("status") or ("-" if not last else "not started yet"),
                      last.get("fired_at") or "-"))
    widths = [max(len(r[i]) for r in cells) for i in range(len(cells[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
            for r in cells]


@trigger.command("pause")
@click.argument("name", callback=_checked_name)
@nats_url_option
@prefix_option
def pause_cmd(name: str, nats_url: str | None, prefix: str) -> None:
    """Stop NAME firing until it is resumed (a subject trigger's messages wait)."""
    from noetl_stream.server import trigger_ops

    changed = _on_bus(nats_url, prefix, lambda bus: trigger_ops.set_state(bus, name, "paused"))
    click.echo(f"trigger {name} {'paused' if changed else 'was already paused'}")


@trigger.command("resume")
@click.argument("name", callback=_checked_name)
@nats_url_option
@prefix_option
def resume_cmd(name: str, nats_url: str | None, prefix: str) -> None:
    """Let a paused trigger fire again."""
    from noetl_stream.server import trigger_ops

    changed = _on_bus(nats_url, prefix, lambda bus: trigger_ops.set_state(bus, name, "active"))
    click.echo(f"trigger {name} {'resumed' if changed else 'was already active'}")


@trigger.command("fire")
@click.argument("name", callback=_checked_name)
@click.option("--wait", "wait_s", type=click.FloatRange(min=0), default=10.0, show_default=True,
              metavar="SECONDS", help="How long to wait for a server to start the execution (0: not at all).")
@nats_url_option
@prefix_option
def fire_cmd(name: str, wait_s: float, nats_url: str | None, prefix: str) -> None:
    """Fire NAME once, now, and say which execution a server started for it (exit 1 when the
    fire starts nothing: a template fails, the playbook is no longer registered).
    """
    from noetl_stream.server.trigger_fire_outcome import fire_and_wait

    outcome = _on_bus(nats_url, prefix, lambda bus: fire_and_wait(bus, name, wait_s))
    if outcome.started is False:
        fail(EXIT_FAILED, f"trigger {name} fired for {outcome.nominal_time}, but no execution "
                          f"started: {outcome.reason}")
    if outcome.started:
        click.echo(f"trigger {name} started execution {outcome.execution_id} for {outcome.nominal_time}")
        return
    click.echo(f"trigger {name} fired for {outcome.nominal_time}")
    if wait_s > 0:
        click.echo(f"no server started execution {outcome.execution_id} within {wait_s:g}s; it "
                   "starts once a `noetl-stream server` runs on this NATS", err=True)


def _moment(text: str) -> datetime:
    """An RFC 3339 time; a time without an offset is UTC."""
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise click.BadParameter(f"not a time: {text!r} (write e.g. 2026-11-01T02:00:00Z)") from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


@trigger.command("backfill")
@click.argument("name", callback=_checked_name)
@click.option("--from", "start", required=True, help="First instant (RFC 3339; UTC without an offset).")
@click.option("--to", "end", required=True, help="Last instant, included.")
@nats_url_option
@prefix_option
def backfill_cmd(name: str, start: str, end: str, nats_url: str | None, prefix: str) -> None:
    """One execution per fire time of NAME's schedule from --from to --to (a server starts them;
    a time that already has its execution starts nothing new).
    """
    from noetl_stream.server import trigger_ops

    first, last = _moment(start), _moment(end)
    times = _on_bus(nats_url, prefix, lambda bus: trigger_ops.backfill(bus, name, first, last))
    click.echo(f"trigger {name}: {len(times)} fire time(s) sent"
               + (f", {times[0]} to {times[-1]}" if times else ""))


@trigger.command("show")
@click.argument("name", callback=_checked_name)
@click.option("--events", "count", type=click.IntRange(0, 500), default=10, show_default=True,
              help="How many of its latest events to show (fired, failed, paused, ...).")
@click.option("--json", "as_json", is_flag=True, help="One JSON document: the trigger and its events.")
@nats_url_option
@prefix_option
def show_cmd(name: str, count: int, as_json: bool, nats_url: str | None, prefix: str) -> None:
    """NAME: state, source, document, next fire times, last execution and its latest events."""
    from noetl_stream.cli.trigger_show import show_lines
    from noetl_stream.server import trigger_ops
    from noetl_stream.server.trigger_history import history

    async def read(bus: Bus) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        detail = await trigger_ops.detail(bus, name)
        events = (await history(bus, name, limit=count, newest=True))[0] if count else []
        return detail, events

    detail, events = _on_bus(nats_url, prefix, read)
    if as_json:
        click.echo(jsonutil.dumps({**detail, "events": events}).decode())
        return
    for line in show_lines(detail, events):
        click.echo(line)


@trigger.command("delete")
@click.argument("name", callback=_checked_name)
@nats_url_option
@prefix_option
def delete_cmd(name: str, nats_url: str | None, prefix: str) -> None:
    """Remove NAME: its schedule, or its consumer (and the stream made for it)."""
    from noetl_stream.server import trigger_ops

    _on_bus(nats_url, prefix, lambda bus: trigger_ops.delete(bus, name))
    click.echo(f"trigger {name} deleted")
