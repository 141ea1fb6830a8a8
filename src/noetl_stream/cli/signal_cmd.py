"""`noetl-stream signal <execution_id> <name> --data JSON`: send an external signal to an
execution (the same message any NATS client may publish, bus/signals.py).

With --server the signal goes through that server's HTTP API (POST .../signals/NAME; --id is
sent as its Idempotency-Key).

Before sending, the command reads the execution's committed state: an unknown or ended
execution, or one where no listening step's guards name the signal, is refused (exit 2) unless
--force. Over HTTP the server makes the same checks (404 unknown, 409 ended or no listener;
--force sends `?force=true`, which skips the listener check only).

Exit codes: 0 stored in the events stream, 2 bad input, unknown or ended execution, no listener
for that name (over HTTP also: not authenticated), 3 NATS or the server unreachable, or no events
stream.
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
    remote_options,
)
from noetl_stream.errors import InfrastructureError


@click.command("signal")
@execution_id_argument
@click.argument("name")
@click.option("--data", "raw_data", default="null", show_default=True, metavar="JSON",
              help="The signal's data (any JSON value); listeners read it as `event.data`.")
@click.option("--id", "msg_id", default=None, metavar="ID",
              help="Message id: a second signal with the same id within the stream's duplicate "
                   "window is dropped.")
@click.option("--force", is_flag=True,
              help="Send even when the execution is unknown, ended or nothing listens for NAME.")
@nats_url_option
@prefix_option
@remote_options
def send_signal(execution_id: str, name: str, raw_data: str, msg_id: str | None, force: bool,
                nats_url: str | None, prefix: str, server_url: str | None,
                token: str | None) -> None:
    """Publish signal NAME to EXECUTION_ID; `eval_mode: on_event` steps see `signal.NAME`."""
    from noetl_stream.bus.signals import publish_signal, valid_signal_name, why_unheard
    from noetl_stream.cli.remote import RemoteError
    from noetl_stream.cli.remote_cmds import signal_remote
    from noetl_stream.services import client_bus

    try:
        data = jsonutil.loads(raw_data)
    except ValueError:
        fail(EXIT_REJECTED, f"--data is not valid JSON: {raw_data!r}")
    if not valid_signal_name(name):
        fail(EXIT_REJECTED, f'signal name "{name}": letters, digits, - and _, joined by dots')

    async def go() -> int:
        if server_url is not None:
            return await signal_remote(server_url, token, execution_id, name, data, msg_id,
                                       force=force)
        async with client_bus(nats_url, prefix=prefix, name="noetl-stream-signal") as bus:
            problem = None if force else await why_unheard(bus, execution_id, name)
            if problem is not None:
                raise ValueError(f"{problem}; signal not sent (--force sends it anyway)")
            return await publish_signal(bus, execution_id, name, data, msg_id=msg_id)

    try:
        seq = asyncio.run(go())
    except RemoteError as exc:
        fail(exc.exit_code, str(exc))
    except ValueError as exc:
        fail(EXIT_REJECTED, str(exc))
    except (InfrastructureError, NatsError, TimeoutError) as exc:
        fail(EXIT_INFRA, f"signal not stored: {exc or type(exc).__name__}")
    click.echo(f"signal.{name} sent to {execution_id} (events stream sequence {seq})")
