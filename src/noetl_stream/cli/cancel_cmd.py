"""`noetl-stream cancel <execution_id> [--reason TEXT] [--wait]`: ask the server to cancel an
execution (server/cancel.py) and print its answer; with --wait, follow the execution's events
until it ends.

Exit codes: 0 cancel accepted (with --wait: the execution ended cancelled), 1 with --wait: it
ended otherwise, 2 refused (no such execution, already finished), 3 NATS unreachable or no
server answered.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import click
from nats.errors import Error as NatsError

from noetl_stream.cli.common import (
    EXIT_FAILED,
    EXIT_INFRA,
    EXIT_OK,
    EXIT_REJECTED,
    POSITIVE_SECONDS,
    execution_id_argument,
    fail,
    nats_url_option,
    prefix_option,
    remote_options,
    run_async,
)
from noetl_stream.errors import InfrastructureError
from noetl_stream.jsonutil import JsonObject
from noetl_stream.messages import RequestReply

if TYPE_CHECKING:
    from noetl_stream.bus.connection import Bus


@click.command("cancel")
@execution_id_argument
@click.option("--reason", default=None, metavar="TEXT", help="Why; recorded on the events.")
@click.option("--wait", "wait_end", is_flag=True, help="Follow the execution until it ends.")
@click.option("--timeout", "timeout_s", type=POSITIVE_SECONDS, default=10.0, metavar="SECONDS",
              show_default=True,
              help="Seconds to wait for the server's answer (and, with --wait, for the end).")
@nats_url_option
@prefix_option
@remote_options
def cancel(execution_id: str, reason: str | None, wait_end: bool, timeout_s: float,
           nats_url: str | None, prefix: str, server_url: str | None, token: str | None) -> None:
    """Cancel EXECUTION_ID: running steps stop, no new step starts, and it ends `cancelled`;
    children it waits for are cancelled too.
    """
    from noetl_stream.services import client_bus

    if server_url is not None:  # POST .../cancel over the HTTP API (cli/remote_cmds.py)
        from noetl_stream.cli.remote_cmds import cancel_remote

        cancel_remote(server_url, token, execution_id, reason, wait_end, timeout_s)

    async def go() -> tuple[RequestReply | None, JsonObject | None]:
        async with client_bus(nats_url, prefix=prefix, name="noetl-stream-cancel") as bus:
            return await _cancel(bus, execution_id, reason, wait_end, timeout_s)

    try:
        reply, final = run_async(go())
    except (InfrastructureError, NatsError) as exc:
        fail(EXIT_INFRA, f"cancel request not sent: {exc or type(exc).__name__}")
    except TimeoutError:
        fail(EXIT_INFRA, f"{execution_id} did not end within {timeout_s:g}s")
    if reply is None:
        fail(EXIT_INFRA, f"no server answered within {timeout_s:g}s (the request is stored and "
             "is handled when a server runs; a repeated request is dropped as a duplicate)")
    if not reply.accepted:
        fail(EXIT_REJECTED, "; ".join(reply.errors) or "cancel refused")
    click.echo(f"cancel of {execution_id} requested", err=True)
    if final is None:
        return
    event_type = final.get("event_type", "")
    status = str(final.get("status")
                 or (event_type.removeprefix("execution.") if isinstance(event_type, str) else ""))
    click.echo(f"{execution_id} {status}")
    raise SystemExit(EXIT_OK if status == "cancelled" else EXIT_FAILED)


async def _cancel(bus: Bus, execution_id: str, reason: str | None, wait_end: bool,
                  timeout_s: float) -> tuple[RequestReply | None, JsonObject | None]:
    """Send the request with a reply inbox; with `wait_end`, also follow events to the end."""
    from noetl_stream.bus.watcher import ExecutionWatch
    from noetl_stream.server.cancel import request_cancel

    finished = await _finished(bus, execution_id)
    if finished is not None:
        return finished, None  # nothing to ask; a repeated request would be dropped unanswered
    inbox = bus.nc.new_inbox()
    sub = await bus.nc.subscribe(inbox, max_msgs=1)
    # Watching starts first, from the execution's first event, so the end cannot be missed.
    watch = ExecutionWatch(bus, execution_id) if wait_end else None
    try:
        if watch is not None:
            await watch.start()
        await request_cancel(bus, execution_id, reason=reason, requested_by="cli", reply_to=inbox)
        try:
            msg = await sub.next_msg(timeout=timeout_s)
        except (TimeoutError, NatsError):
            # No answer: no server runs, or a repeated request was dropped as a duplicate. The
            # committed state still says whether there is anything left to cancel.
            return await _finished(bus, execution_id), None
        reply = RequestReply.model_validate_json(msg.data)
        if watch is None or not reply.accepted:
            return reply, None
        return reply, await watch.wait(timeout_s)
    finally:
        if watch is not None:
            await watch.stop()
        with contextlib.suppress(NatsError):  # gone already once its one message came
            await sub.unsubscribe()


async def _finished(bus: Bus, execution_id: str) -> RequestReply | None:
    """A refusal when the execution has already ended, else None."""
    from nats.js.errors import KeyNotFoundError

    from noetl_stream import jsonutil

    executions = await bus.js.key_value("noetl_executions")
    try:
        entry = await executions.get(execution_id)
    except KeyNotFoundError:
        return None
    status = jsonutil.loads(entry.value or b"{}").get("status")
    if status in (None, "running"):
        return None
    return RequestReply(accepted=False, execution_id=execution_id,
                        errors=[f"execution {execution_id} already {status}; nothing to cancel"])
