"""`noetl-stream logs ID [--step S] [--follow] [--json]`: an execution's events as readable
lines, each with what its tasks printed (`output` of outcome events), read from the events stream.

Exit codes: 0 the events were shown, 2 no such execution, 3 NATS unreachable.
"""

from __future__ import annotations

import asyncio

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
    run_async,
)
from noetl_stream.errors import InfrastructureError
from noetl_stream.jsonutil import JsonObject
from noetl_stream.subjects import TERMINAL_EXECUTION_EVENTS


@click.command("logs")
@execution_id_argument
@click.option("--step", "steps", multiple=True, metavar="STEP",
              help="Only events of this step. Repeatable.")
@click.option("--follow", "-f", is_flag=True,
              help="Keep printing new events until the execution ends.")
@click.option("--json", "as_json", is_flag=True, help="Each event as one JSON line, as stored.")
@nats_url_option
@prefix_option
def logs(execution_id: str, steps: tuple[str, ...], follow: bool, as_json: bool,
         nats_url: str | None, prefix: str) -> None:
    """Show EXECUTION_ID's events, oldest first, with each task's captured stdout and stderr."""
    from noetl_stream.api.event_log import follow as follow_events
    from noetl_stream.bus.connection import Bus
    from noetl_stream.bus.delivery import pending_of
    from noetl_stream.bus.signals import decode_event_body
    from noetl_stream.bus.watcher import EndOfLog
    from noetl_stream.cli.execution_log import is_known, read_events
    from noetl_stream.services import client_bus

    show = _Shown(steps, as_json)

    async def tail(bus: Bus, after_seq: int) -> None:
        end = EndOfLog()
        async with follow_events(bus, execution_id, after_seq=after_seq) as feed:
            while True:
                msg = await feed.get()
                try:
                    event = decode_event_body(bus.topology, msg.subject, msg.data)
                except ValueError:
                    continue
                show(event)
                if end.see(event, pending_of(msg)) is not None:
                    return

    async def go() -> bool:
        async with client_bus(nats_url, prefix=prefix, name="noetl-stream-logs") as bus:
            if not await is_known(bus, execution_id):
                return False
            events, last = await read_events(bus, execution_id)
            for event in events:
                show(event)
            read = EndOfLog()
            ended = any(read.see(e, len(events) - 1 - i) is not None
                        for i, e in enumerate(events))
            show.refuse_unseen_steps(execution_id, events, ended)
            if follow and not ended:
                await tail(bus, last)
            return True

    try:
        found = run_async(go())
    except (InfrastructureError, NatsError, TimeoutError) as exc:
        fail(EXIT_INFRA, f"could not read the execution's events: {exc or type(exc).__name__}")
    except (KeyboardInterrupt, asyncio.CancelledError):
        return
    if not found:
        fail(EXIT_REJECTED, f"no execution {execution_id} is known")


class _Shown:
    """Prints the events `logs` shows: those of the chosen steps, as JSON lines or as text."""

    def __init__(self, steps: tuple[str, ...], as_json: bool) -> None:
        self.steps = steps
        self.as_json = as_json
        self.ended = False  # an execution.<end> was shown and no restart since

    def refuse_unseen_steps(self, execution_id: str, events: list[JsonObject], ended: bool) -> None:
        """Exit 2 naming a chosen step that no event of the ended execution has (a typo, or a
        step that never ran), rather than print nothing and exit 0.
        """
        import difflib

        if not ended:
            return  # the step may still start
        seen = sorted({str(e["step"]) for e in events if e.get("step")})
        for step in self.steps:
            if step not in seen:
                near = difflib.get_close_matches(step, seen, n=1)
                hint = f'; did you mean "{near[0]}"?' if near else f"; its steps: {', '.join(seen)}"
                fail(EXIT_REJECTED, f'execution {execution_id} has no event of step "{step}"{hint}')

    def __call__(self, event: JsonObject) -> None:
        from noetl_stream.cli.execution_log import event_lines

        if self.steps and event.get("step") not in self.steps:
            return
        if self.as_json:
            click.echo(jsonutil.dumps_str(event))
            return
        etype = event.get("event_type")
        lines = event_lines(event)
        if etype == "timer.fired" and self.ended:
            # A deadline set while it ran fires on nats-server's clock all the same.
            lines[0] += "  (the execution had ended: nothing to do)"
        self.ended = etype in TERMINAL_EXECUTION_EVENTS or (self.ended and etype != "execution.restarted")
        for line in lines:
            click.echo(line)
