"""`noetl-stream watch`: follow one execution's events until it ends."""

from __future__ import annotations

import asyncio
import sys

import click

from noetl_stream import jsonutil
from noetl_stream.cli.common import (
    EXIT_FAILED,
    EXIT_INFRA,
    EXIT_OK,
    EXIT_REJECTED,
    execution_id_argument,
    fail,
    nats_url_option,
    prefix_option,
    remote_options,
    run_async,
    verbosity,
)
from noetl_stream.errors import InfrastructureError
from noetl_stream.jsonutil import JsonObject


@click.command()
@execution_id_argument
@nats_url_option
@prefix_option
@remote_options
@click.option("--json", "as_json", is_flag=True, help="Print each event as one JSON line.")
def watch(execution_id: str, nats_url: str | None, prefix: str, server_url: str | None,
          token: str | None, as_json: bool) -> None:
    """Follow an execution's events live until it ends (like nats sub 'noetl.events.<id>.>').

    An execution that has ended is shown from its first event to its last, with the durations
    it had. An id nothing was recorded for exits 2.
    """
    from noetl_stream.bus.connection import connect
    from noetl_stream.bus.watcher import ExecutionWatch
    from noetl_stream.cli.execution_log import is_known
    from noetl_stream.cli.progress import ProgressPrinter
    from noetl_stream.state.results import ResultStore

    if nats_url is None and server_url is None:
        fail(EXIT_REJECTED, "watch needs --nats-url (or NOETL_STREAM_NATS_URL) or --server")
    printer = ProgressPrinter(sys.stdout, show_output=verbosity() > 0)

    def on_event(event: JsonObject) -> None:
        if as_json:
            click.echo(jsonutil.dumps_str(event))
        else:
            printer(event)

    if server_url is not None:
        from noetl_stream.cli.remote_cmds import call, watch_remote

        final = call(watch_remote(server_url, token, execution_id, on_event))
        sys.exit(EXIT_OK if final.get("status") == "completed" else EXIT_FAILED)

    async def go() -> JsonObject | None:
        bus = await connect(str(nats_url), prefix=prefix)
        results = ResultStore(bus.js)
        events: asyncio.Queue[JsonObject] = asyncio.Queue()
        w = ExecutionWatch(bus, execution_id, events.put_nowait)
        try:
            if not await is_known(bus, execution_id):
                return None  # waiting would wait forever for an id nobody started
            await w.start()
            while True:
                event = await events.get()
                # JSON lines show large results' values, not their object store references.
                on_event(await results.resolve(event) if as_json else event)
                end = w.ended()
                if end is not None and events.empty():
                    return end
        finally:
            await w.stop()
            await bus.close()

    try:
        watched = run_async(go())
    except InfrastructureError as exc:
        fail(EXIT_INFRA, str(exc))
    if watched is None:
        fail(EXIT_REJECTED, f"no execution {execution_id} is known")
    sys.exit(EXIT_OK if watched.get("status") == "completed" else EXIT_FAILED)
