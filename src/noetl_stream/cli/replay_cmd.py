"""`noetl-stream replay ID [--from STEP] [--set k=v | --payload JSON]`: run an execution again as
a new execution linked to it, seeded with its results before STEP (server/replays.py asks,
router/replay.py starts it), and follow the new one to its end.

Exit codes as `run`: 0 completed, 1 failed or cancelled, 2 refused (unknown execution, unknown
step), 3 NATS unreachable, 4 still running after --timeout; with --detach, 0 once it is asked for.
"""

from __future__ import annotations

import getpass
from typing import TYPE_CHECKING

import click

from noetl_stream import jsonutil
from noetl_stream.cli.common import (
    EXIT_OK,
    POSITIVE_SECONDS,
    execution_id_argument,
    nats_url_option,
    prefix_option,
    remote_options,
)
from noetl_stream.cli.restart_cmd import recovery_outcome
from noetl_stream.cli.running import parse_payload, report_outcome
from noetl_stream.jsonutil import JsonObject

if TYPE_CHECKING:
    from noetl_stream.bus.connection import Bus


@click.command("replay")
@execution_id_argument
@click.option("--from", "from_step", default=None, metavar="STEP",
              help="Run STEP and every step downstream of it; the other steps keep the "
                   "original's results. Without it: where the original failed or was cancelled "
                   "(its start step for one that completed).")
@click.option("--payload", default=None, metavar="JSON",
              help="JSON object merged over the original's workload.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="Workload value (dots nest); repeatable.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document with the outcome.")
@click.option("--detach", is_flag=True, help="Return once the replay is asked for.")
@click.option("--timeout", "timeout_s", type=POSITIVE_SECONDS, default=None, metavar="SECONDS",
              help="Stop waiting after SECONDS (the execution goes on).")
@nats_url_option
@prefix_option
@remote_options
def replay(execution_id: str, from_step: str | None, payload: str | None, sets: tuple[str, ...],
           as_json: bool, detach: bool, timeout_s: float | None, nats_url: str | None,
           prefix: str, server_url: str | None, token: str | None) -> None:
    """Replay EXECUTION_ID as a new execution linked to it: the steps before STEP are not run
    and keep the original's results; STEP and everything downstream run.
    """
    workload = parse_payload(payload, sets)

    async def go() -> JsonObject:
        from noetl_stream.services import client_bus

        if server_url is not None:
            from noetl_stream.cli.remote_cmds import replay_remote

            return await replay_remote(server_url, token, execution_id, from_step=from_step,
                                       workload=workload, detach=detach, timeout_s=timeout_s)
        async with client_bus(nats_url, prefix=prefix, name="noetl-stream-replay") as bus:
            return await _replay(bus, execution_id, from_step, workload, detach, timeout_s)

    final = recovery_outcome(go(), verb="replay",
                             still_running=f"the replay of {execution_id} still running after "
                             f"{timeout_s} s")
    if detach:
        click.echo(jsonutil.dumps_str(final) if as_json
                   else f"execution {final['execution_id']} replays {execution_id}")
        raise SystemExit(EXIT_OK)
    report_outcome(final, as_json, quiet=True)  # no live progress said why it failed


async def _replay(bus: Bus, execution_id: str, from_step: str | None, workload: JsonObject,
                  detach: bool, timeout_s: float | None) -> JsonObject:
    from noetl_stream.bus.watcher import ExecutionWatch
    from noetl_stream.server.execution_ids import new_execution_id
    from noetl_stream.server.replays import request_replay
    from noetl_stream.state.results import ResultStore

    new_id = new_execution_id()
    watch = ExecutionWatch(bus, new_id)
    await watch.start()
    try:
        asked = await request_replay(bus, execution_id, from_step=from_step, workload=workload,
                                     requested_by=_who(), execution_id=new_id)
        if detach:
            return asked.as_json()
        final = await watch.wait(timeout_s)
        resolved: JsonObject = await ResultStore(bus.js).resolve(final)
        return resolved
    finally:
        await watch.stop()


def _who() -> str | None:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return None
