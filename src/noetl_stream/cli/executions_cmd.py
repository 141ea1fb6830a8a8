"""`noetl-stream executions ...`: executions as a list. A click group, so more subcommands
(`purge`, cli/purge_cmd.py) join it with `executions.add_command(...)`.

Exit codes: 0 listed, 2 a bad option, 3 NATS unreachable.
"""

from __future__ import annotations

import time

import click
from nats.errors import Error as NatsError

from noetl_stream import jsonutil
from noetl_stream.cli.common import EXIT_INFRA, EXIT_REJECTED, fail, nats_url_option, prefix_option, run_async
from noetl_stream.cli.purge_cmd import purge
from noetl_stream.errors import InfrastructureError
from noetl_stream.router.state import ExecutionState

STATUSES = ("running", "completed", "failed", "cancelled")


@click.group("executions")
def executions() -> None:
    """Look at executions in bulk: `executions list`, `executions purge`."""


@executions.command("list")
@click.option("--status", "statuses", multiple=True, type=click.Choice((*STATUSES, "waiting")),
              help="Only executions in this status (waiting: running, but waiting for a slot "
                   "under a concurrency limit). Repeatable.")
@click.option("--playbook", default=None, metavar="TEXT",
              help="Only playbooks whose metadata.path or name contains TEXT.")
@click.option("--label", "labels", multiple=True, metavar="KEY[=VALUE]",
              help="Only executions with this label (KEY alone: any value). Repeatable: all must "
                   "match.")
@click.option("--since", default=None, metavar="WHEN",
              help="Only executions started since WHEN: a duration back (30m, 2h, 7d) or an "
                   "ISO-8601 time.")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1),
              help="At most this many, newest first.")
@click.option("--json", "as_json", is_flag=True, help="One JSON document: a list of executions.")
@nats_url_option
@prefix_option
def list_executions(statuses: tuple[str, ...], playbook: str | None, labels: tuple[str, ...],
                    since: str | None, limit: int, as_json: bool, nats_url: str | None, prefix: str) -> None:
    """List executions, newest first, from KV noetl_executions (a rejected request has no state
    and is not listed; `noetl-stream logs ID` shows its reasons).
    """
    from noetl_stream.api.execution_filters import has_label
    from noetl_stream.cli.execution_log import all_states, parse_since, select, table
    from noetl_stream.services import client_bus
    from noetl_stream.state.records import Skips

    now = time.time()
    skips = Skips("execution")
    try:
        since_s = parse_since(since, now) if since else None
    except ValueError as exc:
        fail(EXIT_REJECTED, str(exc))

    async def go() -> list[ExecutionState]:
        async with client_bus(nats_url, prefix=prefix, name="noetl-stream-executions") as bus:
            return await all_states(bus, skips)

    try:
        states = run_async(go())
    except (InfrastructureError, NatsError, TimeoutError) as exc:
        fail(EXIT_INFRA, f"could not read executions: {exc or type(exc).__name__}")
    for line in skips.lines():  # the others are listed all the same
        click.echo(f"warning: {line}", err=True)
    if labels:
        states = [s for s in states if all(has_label(s, wanted) for wanted in labels)]
    rows = select(states, statuses=statuses, playbook=playbook, since=since_s, limit=limit)
    if as_json:
        click.echo(jsonutil.dumps_str([r.as_json() for r in rows]))
        return
    if not rows:  # a lone header would read as a list that failed to load
        shown = shown_filters(statuses, playbook, labels, since)
        click.echo(f"no executions match {shown}" if shown else "no executions")
        return
    for line in table(rows, now):
        click.echo(line)


def shown_filters(statuses: tuple[str, ...], playbook: str | None, labels: tuple[str, ...],
                  since: str | None) -> str:
    """The filters of a `list`, as options written on its command line."""
    parts = [f"--status {s}" for s in statuses]
    parts += [f"--playbook {playbook}"] if playbook is not None else []
    parts += [f"--label {label}" for label in labels]
    parts += [f"--since {since}"] if since is not None else []
    return " ".join(parts)


executions.add_command(purge)
