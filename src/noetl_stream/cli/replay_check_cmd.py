"""`noetl-stream replay-check PLAYBOOK_FILE --against ID... | --recent N`: apply recorded
executions' events to a new version of their playbook and report, per execution, where it would
route differently (server/shadow_check.py reads, server/shadow.py compares).

Exit codes: 0 no execution routes differently, 1 some do (each is named), 2 bad usage or a
playbook file that does not validate, 3 NATS unreachable.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click
from nats.errors import Error as NatsError

from noetl_stream import jsonutil
from noetl_stream.cli.common import (
    EXIT_FAILED,
    EXIT_INFRA,
    EXIT_REJECTED,
    checked_execution_ids,
    fail,
    nats_url_option,
    prefix_option,
    run_async,
)
from noetl_stream.errors import InfrastructureError, PlaybookError

if TYPE_CHECKING:
    from noetl_stream.server.shadow import ShadowReport


@click.command("replay-check")
@click.argument("playbook_file", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--against", "against", multiple=True, metavar="ID", callback=checked_execution_ids,
              help="A recorded execution to replay (repeatable).")
@click.option("--recent", type=click.IntRange(min=1), default=None, metavar="N",
              help="The N latest executions of the playbook (its metadata.path, else its name).")
@click.option("--json", "as_json", is_flag=True, help="One JSON line per execution.")
@nats_url_option
@prefix_option
def replay_check(playbook_file: Path, against: tuple[str, ...], recent: int | None, as_json: bool,
                 nats_url: str | None, prefix: str) -> None:
    """Replay recorded executions against PLAYBOOK_FILE (a new version of their playbook) and
    name, per execution, where it would route differently: a step no longer reached, another
    arc taken, a guard that now errors.
    """
    from noetl_stream.cli.execution_log import load_state
    from noetl_stream.cli.running import load_or_exit
    from noetl_stream.server.shadow_check import check_execution
    from noetl_stream.server.shadow_check import recent as latest
    from noetl_stream.services import client_bus

    if bool(against) == (recent is not None):
        fail(EXIT_REJECTED, "give --against ID... or --recent N")
    _, files = load_or_exit(playbook_file, strict=False)  # exit 2 naming every issue
    candidate = files[0].playbook

    async def go() -> list[ShadowReport] | str:
        async with client_bus(nats_url, prefix=prefix, name="noetl-stream-replay-check") as bus:
            for execution_id in against:  # an unknown id is bad input, not a changed route
                if await load_state(bus, execution_id) is None:
                    return execution_id
            ids = list(against) if against else await latest(bus, candidate, recent or 0)
            return [await check_execution(bus, e, candidate) for e in ids]

    try:
        reports = run_async(go())
    except (InfrastructureError, NatsError, TimeoutError) as exc:
        fail(EXIT_INFRA, f"could not read the executions: {exc or type(exc).__name__}")
    except PlaybookError as exc:
        fail(EXIT_REJECTED, f"a recorded playbook no longer parses: {exc}")
    if isinstance(reports, str):
        fail(EXIT_REJECTED, f"no committed state of execution {reports} (unknown, or removed by "
                            "retention); nothing was checked")
    _report(reports, as_json)


def _report(reports: list[ShadowReport], as_json: bool) -> None:
    for r in reports:
        if as_json:
            click.echo(jsonutil.dumps_str(r.as_json()))
        elif not r.differences:
            events = f"{r.events} event{'s' if r.events != 1 else ''}"
            click.echo(f"{r.execution_id}: routes the same over its {events}")
        else:
            click.echo(f"{r.execution_id}: " + "; ".join(r.differences))
    different = sum(1 for r in reports if r.differences)
    if not as_json:
        click.echo(f"{len(reports) - different} of {len(reports)} execution(s) route the same")
    if different:
        raise SystemExit(EXIT_FAILED)
