"""`noetl-stream executions purge --older-than 7d [--status failed]`: remove finished executions
now (their events, vars and state), as the retention sweep does after NOETL_STREAM_RETENTION.
Running executions are never purged.

Exit codes: 0 done (also when nothing matched), 2 bad input, 3 NATS unreachable.
"""

from __future__ import annotations

from datetime import UTC, datetime

import click
from nats.errors import Error as NatsError

from noetl_stream import config, jsonutil
from noetl_stream.cli.common import EXIT_INFRA, EXIT_REJECTED, fail, nats_url_option, prefix_option, run_async
from noetl_stream.errors import InfrastructureError

FINISHED_STATUSES = ("completed", "failed", "cancelled")


@click.command("purge")
@click.option("--older-than", "older_than", required=True, metavar="AGE",
              help="Finished at least this long ago: 7d, 12h, 30m, 45s, 2w.")
@click.option("--status", type=click.Choice(FINISHED_STATUSES), default=None,
              help="Only executions that ended so.")
@click.option("--dry-run", is_flag=True, help="List what would be removed; remove nothing.")
@click.option("--json", "as_json", is_flag=True, help="One JSON line per execution.")
@nats_url_option
@prefix_option
def purge(older_than: str, status: str | None, dry_run: bool, as_json: bool,
          nats_url: str | None, prefix: str) -> None:
    """Remove finished executions (events, vars, state) older than AGE; never running ones."""
    from noetl_stream.server.retention import Finished, purge_finished
    from noetl_stream.services import client_bus

    try:
        age_s = config.parse_age(older_than)
    except ValueError as exc:
        fail(EXIT_REJECTED, f"--older-than: {exc}")

    async def go() -> list[Finished]:
        async with client_bus(nats_url, prefix=prefix, name="noetl-stream-purge") as bus:
            return await purge_finished(bus, older_than_s=age_s, status=status, dry_run=dry_run)

    try:
        found = run_async(go())
    except (InfrastructureError, NatsError, TimeoutError) as exc:
        fail(EXIT_INFRA, f"executions not reachable: {exc or type(exc).__name__}")
    if as_json:
        for f in found:
            click.echo(jsonutil.dumps_str({"execution_id": f.execution_id, "status": f.status,
                                           "finished_at": f.finished_at, "purged": not dry_run}))
        return
    if found:
        click.echo(f"{'EXECUTION':<22} {'STATUS':<10} FINISHED")
        for f in found:
            when = datetime.fromtimestamp(f.finished_at, UTC).strftime("%Y-%m-%d %H:%M:%SZ")
            click.echo(f"{f.execution_id:<22} {f.status:<10} {when}")
    verb = "would remove" if dry_run else "removed"
    click.echo(f"{verb} {len(found)} finished execution{'s' if len(found) != 1 else ''}", err=True)
