"""An aiohttp application served on HOST:PORT for the duration of a block: the HTTP API and the
`--metrics` listener both start and stop this way, and both report a port they cannot bind the
same way (an infrastructure error naming the address, never a traceback).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

from aiohttp import web

from noetl_stream.errors import InfrastructureError


@contextlib.asynccontextmanager
async def serve_app(app: web.Application, host: str, port: int, *, what: str,
                    access_log: logging.Logger | None = None) -> AsyncIterator[str]:
    """Serve `app`; yields its base URL (the bound port when `port` is 0)."""
    runner = web.AppRunner(app, access_log=access_log)
    await runner.setup()
    try:
        try:
            await web.TCPSite(runner, host, port).start()
        except OSError as exc:  # the port is taken, or the address is not this machine's
            raise InfrastructureError(f"cannot serve {what} on {host}:{port}: "
                                      f"{exc.strerror or exc}") from None
        bound = runner.addresses[0] if runner.addresses else (host, port)
        yield f"http://{bound[0]}:{bound[1]}"
    finally:
        await runner.cleanup()
