"""`noetl-stream restart ID [--from STEP] [--set k=v | --payload JSON] [--latest]`: reopen a failed or
cancelled execution (or any one from a named step) and follow it to its new end
(server/restart.py asks, router/restart.py applies).

Exit codes: 0 it completed, 1 it failed or was cancelled again, 2 refused (unknown execution,
unknown step, a running or completed execution without --from), 3 NATS unreachable; with
--detach, 0 once the restart is recorded.
"""

from __future__ import annotations

import asyncio
import getpass
from collections.abc import Coroutine
from typing import TYPE_CHECKING

import click
from nats.errors import Error as NatsError

from noetl_stream import jsonutil
from noetl_stream.cli.common import (
    EXIT_INFRA,
    EXIT_OK,
    EXIT_REJECTED,
    EXIT_STILL_RUNNING,
    POSITIVE_SECONDS,
    execution_id_argument,
    fail,
    nats_url_option,
    prefix_option,
    remote_options,
    run_async,
)
from noetl_stream.cli.remote import RemoteError
from noetl_stream.cli.running import parse_payload, report_outcome
from noetl_stream.errors import InfrastructureError, PlaybookError, RestartRefused
from noetl_stream.jsonutil import JsonObject
from noetl_stream.subjects import TERMINAL_EXECUTION_EVENTS

if TYPE_CHECKING:
    from noetl_stream.bus.connection import Bus



@click.command("restart")
@execution_id_argument
@click.option("--from", "from_step", default=None, metavar="STEP",
              help="Run STEP and every step downstream of it again (any execution); without it, "
                   "the steps that failed or were cancelled (a failed or cancelled execution).")
@click.option("--payload", default=None, metavar="JSON",
              help="JSON object merged over the workload for what runs again.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="Workload value for what runs again (dots nest); repeatable.")
@click.option("--latest", is_flag=True,
              help="Run the newest registered version of the playbook (its metadata.path) from "
                   "now on; refused when it lacks a step the execution has run.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document with the outcome.")
@click.option("--detach", is_flag=True, help="Return once the restart is recorded.")
@click.option("--timeout", "timeout_s", type=POSITIVE_SECONDS, default=None, metavar="SECONDS",
              help="Stop waiting after SECONDS (the execution goes on).")
@nats_url_option
@prefix_option
@remote_options
def restart(execution_id: str, from_step: str | None, payload: str | None, sets: tuple[str, ...],
            latest: bool, as_json: bool, detach: bool, timeout_s: float | None, nats_url: str | None,
            prefix: str, server_url: str | None, token: str | None) -> None:
    """Restart EXECUTION_ID where it stopped: completed steps keep their results and do not run
    again; the failed step (or STEP and everything downstream) runs again as a new attempt.
    """
    workload = parse_payload(payload, sets)

    async def go() -> JsonObject:
        from noetl_stream.services import client_bus

        if server_url is not None:  # POST .../restart over the HTTP API (cli/remote_cmds.py)
            from noetl_stream.cli.remote_cmds import restart_remote

            return await restart_remote(server_url, token, execution_id, from_step=from_step,
                                        workload=workload, detach=detach, timeout_s=timeout_s,
                                        latest=latest)

        async with client_bus(nats_url, prefix=prefix, name="noetl-stream-restart") as bus:
            return await _restart(bus, execution_id, from_step, workload, detach, timeout_s,
                                  latest)

    final = recovery_outcome(go(), verb="restart",
                             still_running=f"execution {execution_id} still running after "
                             f"{timeout_s} s")
    if detach:
        click.echo(jsonutil.dumps_str(final) if as_json
                   else f"restart {final['restart']} of {execution_id} recorded")
        raise SystemExit(EXIT_OK)
    if final.get("event_type") == "event.ignored":
        fail(EXIT_REJECTED, f"restart refused: {final.get('reason')}")
    report_outcome(final, as_json, quiet=True)  # no live progress said why it failed



def recovery_outcome(asked: Coroutine[object, object, JsonObject], *, verb: str,
                     still_running: str) -> JsonObject:
    """Run a restart or replay request to its answer; each way it can fail is one line with its
    exit code (a replay's refusal is a restart's).
    """
    try:
        return run_async(asked)
    except RestartRefused as exc:
        fail(EXIT_REJECTED, str(exc))
    except RemoteError as exc:  # 404 and 409 say why in the API's words
        fail(exc.exit_code, exc.message if exc.status in (404, 409) else str(exc))
    except PlaybookError as exc:
        fail(EXIT_REJECTED, f"the execution's playbook no longer parses: {exc}")
    except TimeoutError:
        fail(EXIT_STILL_RUNNING, still_running)
    except (InfrastructureError, NatsError) as exc:
        fail(EXIT_INFRA, f"could not {verb} the execution: {exc or type(exc).__name__}")

async def _restart(bus: Bus, execution_id: str, from_step: str | None, workload: JsonObject,
                   detach: bool, timeout_s: float | None, latest: bool) -> JsonObject:
    """Ask for the restart and wait for the end that follows it (or the router's refusal)."""
    from noetl_stream.bus.watcher import ExecutionWatch
    from noetl_stream.server.restart import request_restart

    follower = _Follower()
    watch = ExecutionWatch(bus, execution_id, follower.on_event)
    await watch.start()
    try:
        asked = await request_restart(bus, execution_id, from_step=from_step, workload=workload,
                                      requested_by=_who(), latest=latest)
        if detach:
            return asked.as_json()
        follower.expect(asked.restarted_id, asked.ignored_id)
        return await asyncio.wait_for(asyncio.shield(follower.done), timeout_s)
    finally:
        await watch.stop()


class _Follower:
    """Finds the end that follows a restart in the execution's events. The log holds earlier
    ends too, and events may come before the restart's msg ids are known: they wait in `seen`.
    """

    def __init__(self) -> None:
        self.done: asyncio.Future[JsonObject] = asyncio.get_running_loop().create_future()
        self.seen: list[JsonObject] = []
        self.restarted = self.ignored = ""
        self.marked = False

    def expect(self, restarted: str, ignored: str) -> None:
        self.restarted, self.ignored = restarted, ignored
        for event in self.seen:
            self._take(event)
        self.seen = []

    def on_event(self, event: JsonObject) -> None:
        if not self.restarted:
            self.seen.append(event)
        else:
            self._take(event)

    def _take(self, event: JsonObject) -> None:
        if self.done.done():
            return
        if event.get("event_id") == self.ignored:
            self.done.set_result(event)
        elif event.get("event_id") == self.restarted:
            self.marked = True
        elif self.marked and event.get("event_type") in TERMINAL_EXECUTION_EVENTS:
            self.done.set_result(event)


def _who() -> str | None:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return None
