"""`noetl-stream status <execution_id> [--json]`: what an execution is doing and why it waits,
read from its router state in KV `noetl_executions` (router/explain.py builds the report).

Exit codes: 0 the state was found, 2 no such execution, 3 NATS unreachable.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click
from nats.errors import Error as NatsError

from noetl_stream import jsonutil
from noetl_stream.cli.common import (
    EXIT_INFRA,
    EXIT_REJECTED,
    execution_id_argument,
    fail,
    nats_url_option,
    prefix_option,
    remote_options,
    run_async,
)
from noetl_stream.cli.status_writes import (
    add_unapplied_writes,
    command_lines,
    explain_timeout,
    held_lines,
    unapplied_lines,
)
from noetl_stream.errors import InfrastructureError, PlaybookError

if TYPE_CHECKING:
    from noetl_stream.bus.connection import Bus
    from noetl_stream.dsl.models import Playbook


@click.command("status")
@execution_id_argument
@click.option("--json", "as_json", is_flag=True, help="Print the report as one JSON document.")
@nats_url_option
@prefix_option
@remote_options
def status(execution_id: str, as_json: bool, nats_url: str | None, prefix: str,
           server_url: str | None, token: str | None) -> None:
    """Show EXECUTION_ID's status: running steps and since when, deadlines, loop iterations in
    flight, delayed tokens, joins and the branches they wait for; the result or error once done.
    """
    from noetl_stream.services import client_bus

    if server_url is not None:  # the API's execution summary (cli/remote_cmds.py)
        from noetl_stream.cli.remote_cmds import status_remote

        return status_remote(server_url, token, execution_id, as_json)

    async def read(bus: Bus) -> dict[str, Any] | None:
        return await _report(bus, execution_id, time.time())

    async def go() -> dict[str, Any] | None:
        async with client_bus(nats_url, prefix=prefix, name="noetl-stream-status") as bus:
            try:
                return await read(bus)
            except (NatsError, TimeoutError) as exc:
                await explain_timeout(bus, exc)
                raise

    try:
        report = run_async(go())
    except (InfrastructureError, NatsError, TimeoutError) as exc:
        fail(EXIT_INFRA, f"could not read the execution state: {exc or type(exc).__name__}")
    if report is None:
        fail(EXIT_REJECTED, f"no execution {execution_id} is known")
    if as_json:
        click.echo(jsonutil.dumps_str(report))
        return
    for line in human_lines(report):
        click.echo(line)


async def _report(bus: Bus, execution_id: str, now: float) -> dict[str, Any] | None:
    """The explain() report of the execution's committed state; None when there is none."""
    from nats.js.errors import KeyNotFoundError

    from noetl_stream.dsl import parse_playbook
    from noetl_stream.router.explain import explain
    from noetl_stream.router.state import ExecutionState
    from noetl_stream.tools.registry import installed_kinds

    executions = await bus.js.key_value("noetl_executions")
    try:
        entry = await executions.get(execution_id)
    except KeyNotFoundError:
        return None
    if not entry.value:
        return None
    state = ExecutionState.from_dict(jsonutil.loads(entry.value))
    # The report shows every step's status and the result, stored beside the state.
    from noetl_stream.state.results import ResultStore
    from noetl_stream.state.step_results import StepResults
    await StepResults(bus.js, ResultStore(bus.js)).load(state, steps=False)
    playbook = None
    catalog = await bus.js.key_value("noetl_catalog")
    try:
        text = (await catalog.get(state.playbook_key)).value or b""
        playbook = parse_playbook(text.decode(), state.playbook_key, kinds=installed_kinds()).playbook
    except (KeyNotFoundError, PlaybookError):
        pass  # the report still holds what the state says; only step kinds and join preds are lost
    report = explain(state, playbook, now)
    await _add_pools(bus, report, playbook)
    await add_unapplied_writes(bus, report, now)
    return report


async def _add_pools(bus: Bus, report: dict[str, Any], playbook: Playbook | None) -> None:
    """Name the pool each running command waits in and how many live workers it has, so a
    command nobody can take (no worker of its pool alive) is said, not just waited on.
    """
    from noetl_stream.bus.heartbeats import live_processes

    running = [r for r in report.get("running", []) if "listen" not in r]
    if not running or playbook is None:
        return
    live: dict[str, int] = {}
    for process in await live_processes(bus):
        if process.get("role") == "worker":
            live[str(process.get("pool"))] = live.get(str(process.get("pool")), 0) + 1
    for run in running:
        try:
            pool = playbook.step(run["step"]).pool or "default"
        except KeyError:
            continue
        run["pool"] = pool
        run["live_workers"] = live.get(pool, 0)


def _when(ts: float | None) -> str:
    if not ts:
        return "-"
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def human_lines(report: dict[str, Any]) -> list[str]:
    """The report as short lines for a terminal."""
    lines = [f"execution {report['execution_id']}: {report['status']}"
             + (f" ({report['playbook']})" if report.get("playbook") else ""),
             f"  started {_when(report.get('started_at'))}, {report['events_applied']} "
             f"event{'' if report['events_applied'] == 1 else 's'} applied"]
    if report.get("parent_execution_id"):
        lines.append(f"  child of {report['parent_execution_id']}")
    if report["status"] != "running":
        error = report.get("error")
        if error:
            lines.append(f"  error: {error.get('message', error)}")
        else:
            lines.append(f"  result: {jsonutil.dumps_str(report.get('result'))}")
        return lines
    lines += unapplied_lines(report, _when) + held_lines(report, _when)
    slot = report.get("concurrency") or {}
    if slot.get("waiting"):
        lines.append(f"  waiting for a slot: at most {slot['limit']} of {slot['group']} run at "
                     f"once (on_limit: {slot['on_limit']})")
    elif not (report["running"] or report["delayed"] or report["joins"]):
        lines.append("  waiting on nothing the state records")
    for run in report["running"]:
        lines += _run_lines(run) + command_lines(run, report)
    for token in report["delayed"]:
        lines.append(f"  token {token['from']} -> {token['to']} delayed until "
                     f"{_when(token['fire_at'])} (in {token['in_s']:g}s)")
    for join in report["joins"]:
        waiting = ", ".join(join["waiting_for"]) or "-"
        lines.append(f"  join {join['step']} waits for {waiting} "
                     f"(arrived: {', '.join(join['arrived']) or '-'})")
    return lines


def _run_lines(run: dict[str, Any]) -> list[str]:
    """What one running step waits for, its listeners, children and iterations."""
    head = (f"  step {run['step']} (run {run['run']}): waits for {run['waits_for']} "
            f"since {_when(run['since'])} ({run['waiting_s']:g}s)")
    if run.get("deadline"):
        head += f", deadline {_when(run['deadline'])}" + (" OVERDUE" if run["overdue"] else "")
    lines = [head]
    if run.get("live_workers") == 0:
        lines.append(f"    pool {run['pool']!r} has no live worker: the command waits until "
                     f"one starts (noetl-stream worker --pool {run['pool']})")
    lines += [f"    listens for: {rule}" for rule in run.get("listen", [])]
    lines += [f"    child execution {child} (`noetl-stream status {child}`)"
              for child in run.get("children", [])]
    iterations = run.get("iterations")
    if iterations:
        lines += _iteration_lines(iterations)
    return lines


def _iteration_lines(iterations: dict[str, Any]) -> list[str]:
    if iterations["total"] is None:  # a cursor loop: slots claim until none is left
        lines = [f"    iterations: {iterations['done']} done, "
                 f"{len(iterations['in_flight'])} in flight, "
                 f"{iterations.get('exhausted', 0)} of {iterations.get('slots')} "
                 "claiming slots found nothing left"]
    else:
        lines = [f"    iterations: {iterations['done']} of {iterations['total']} done, "
                 f"{len(iterations['in_flight'])} in flight"]
    for it in iterations["in_flight"]:
        deadline = f", deadline {_when(it['deadline'])}" if it.get("deadline") else ""
        lines.append(f"      #{it['index']} since {_when(it['since'])}{deadline}")
    return lines
