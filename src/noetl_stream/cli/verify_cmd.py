"""`noetl-stream verify ID | --all [--since WHEN]`: rebuild each execution's state from its events
and compare it with the committed one (server/verify.py).

Exit codes: 0 every state equals its rebuild, 1 one differs (the first differing field is named),
2 an unknown execution or bad usage, 3 NATS unreachable.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import click
from nats.errors import Error as NatsError

from noetl_stream import jsonutil
from noetl_stream.cli.common import (
    EXIT_FAILED,
    EXIT_INFRA,
    EXIT_REJECTED,
    checked_execution_id,
    fail,
    nats_url_option,
    prefix_option,
    run_async,
)
from noetl_stream.errors import InfrastructureError, PlaybookError

if TYPE_CHECKING:
    from noetl_stream.server.verify import Verdict


@click.command("verify")
@click.argument("execution_id", required=False, callback=checked_execution_id)
@click.option("--all", "every", is_flag=True, help="Verify every execution with a committed state.")
@click.option("--since", default=None, metavar="WHEN",
              help="With --all: only executions started since WHEN (30m, 2h, 1d, or ISO-8601).")
@click.option("--json", "as_json", is_flag=True, help="One JSON line per execution.")
@nats_url_option
@prefix_option
def verify(execution_id: str | None, every: bool, since: str | None, as_json: bool,
           nats_url: str | None, prefix: str) -> None:
    """Rebuild EXECUTION_ID's state from its recorded events through the router and compare it,
    field by field, with the state committed in KV (and the summary of its end event).
    """
    from noetl_stream.bus.connection import Bus
    from noetl_stream.cli.execution_log import parse_since
    from noetl_stream.server.verify import execution_ids
    from noetl_stream.server.verify import verify as verify_one
    from noetl_stream.services import client_bus

    if every == (execution_id is not None):
        fail(EXIT_REJECTED, "give one EXECUTION_ID or --all")
    if since is not None and not every:
        fail(EXIT_REJECTED, "--since goes with --all")
    try:
        since_s = parse_since(since, time.time()) if since else None
    except ValueError as exc:
        fail(EXIT_REJECTED, str(exc))

    async def check(bus: Bus) -> list[Verdict]:
        if execution_id is not None:
            return [await verify_one(bus, execution_id)]
        return [await verify_one(bus, e) for e in await execution_ids(bus, since=since_s)]

    async def go() -> list[Verdict]:
        async with client_bus(nats_url, prefix=prefix, name="noetl-stream-verify") as bus:
            return await check(bus)

    try:
        verdicts = run_async(go())
    except (InfrastructureError, NatsError, TimeoutError) as exc:
        fail(EXIT_INFRA, f"could not read the execution: {exc or type(exc).__name__}")
    except PlaybookError as exc:
        fail(EXIT_FAILED, f"the execution's playbook no longer parses: {exc}")
    _report(verdicts, single=execution_id is not None, as_json=as_json)


def _report(verdicts: list[Verdict], *, single: bool, as_json: bool) -> None:
    """One line per execution, then the exit: 1 at the first difference, 2 for an unknown id."""
    for v in verdicts:
        if as_json:
            click.echo(jsonutil.dumps_str(v.as_json()))
        elif v.outcome == "equal":
            click.echo(f"{v.execution_id}: equal to its {v.events} event{'s' if v.events != 1 else ''}")
    unknown = [v for v in verdicts if v.outcome == "unknown"]
    different = [v for v in verdicts if v.outcome == "different"]
    if different:
        first = different[0]
        fail(EXIT_FAILED, f"{first.execution_id} differs from its events at {first.detail}"
             + ("" if single else f" ({len(different)} of {len(verdicts)} executions differ)"))
    if unknown and single:
        fail(EXIT_REJECTED, unknown[0].detail)
    if not single and not as_json:
        click.echo(f"{len(verdicts) - len(unknown)} execution(s) verified"
                   + (f", {len(unknown)} without a log to verify" if unknown else ""))
