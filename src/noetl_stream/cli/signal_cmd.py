"""`noetl-stream signal <execution_id> <name> --data JSON`: send an external signal to an
execution (the same message any NATS client may publish, runtime/signals.py).

Exit codes: 0 stored in the events stream, 2 bad input, 3 NATS unreachable or no events stream.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any, NoReturn

import click
from nats.errors import Error as NatsError

from noetl_stream import config, jsonutil
from noetl_stream.errors import InfrastructureError

EXIT_REJECTED, EXIT_INFRA = 2, 3


def _fail(code: int, message: str) -> NoReturn:
    click.echo(f"noetl-stream: {message}", err=True)
    sys.exit(code)


@click.command("signal")
@click.argument("execution_id")
@click.argument("name")
@click.option("--data", "raw_data", default="null", show_default=True, metavar="JSON",
              help="The signal's data (any JSON value); listeners read it as `event.data`.")
@click.option("--id", "msg_id", default=None, metavar="ID",
              help="Message id: a second signal with the same id within the stream's duplicate "
                   "window is dropped.")
@click.option("--nats-url", envvar=config.ENV_NATS_URL, default=None, metavar="URL",
              help="NATS server with JetStream (env NOETL_STREAM_NATS_URL). Without it, the "
                   "embedded nats-server of NOETL_STREAM_HOME is used.")
@click.option("--prefix", envvar=config.ENV_PREFIX, default="noetl", show_default=True,
              help="Subject prefix (env NOETL_STREAM_PREFIX).")
def send_signal(execution_id: str, name: str, raw_data: str, msg_id: str | None,
                nats_url: str | None, prefix: str) -> None:
    """Publish signal NAME to EXECUTION_ID; `eval_mode: on_event` steps see `signal.NAME`."""
    from noetl_stream.runtime.connection import connect
    from noetl_stream.runtime.services import open_stack
    from noetl_stream.runtime.signals import publish_signal, valid_signal_name

    try:
        data = jsonutil.loads(raw_data)
    except ValueError:
        _fail(EXIT_REJECTED, f"--data is not valid JSON: {raw_data!r}")
    if not valid_signal_name(name):
        _fail(EXIT_REJECTED, f'signal name "{name}": letters, digits, - and _, joined by dots')

    async def go() -> int:
        if nats_url is None:
            async with open_stack(None, prefix=prefix, name="noetl-stream-signal") as stack:
                return await publish_signal(stack.bus, execution_id, name, data, msg_id=msg_id)
        bus = await connect(nats_url, prefix=prefix, name="noetl-stream-signal")
        try:
            return await publish_signal(bus, execution_id, name, data, msg_id=msg_id)
        finally:
            await bus.close()

    try:
        seq: Any = asyncio.run(go())
    except ValueError as exc:
        _fail(EXIT_REJECTED, str(exc))
    except (InfrastructureError, NatsError, TimeoutError) as exc:
        _fail(EXIT_INFRA, f"signal not stored: {exc or type(exc).__name__}")
    click.echo(f"signal.{name} sent to {execution_id} (events stream sequence {seq})")
