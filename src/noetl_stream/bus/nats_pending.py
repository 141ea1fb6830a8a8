"""The one place that uses nats-py's private members: a connection's pending buffer.

bus/wire.py writes a publish's protocol command in one pass, which `Client.publish` cannot take:
nats-py has no public call that sends a command already built. So the command joins the
connection's pending buffer as `Client.publish` does it itself (nats/aio/client.py
`_send_publish`, read in nats-py 2.16): `_send_command(command)`, then `_flush_pending()` when the
flusher's queue `_flush_queue` is empty, which wakes the flusher task. The counters
(`Client.stats`) and limits (`max_payload`) it keeps are public.

pyproject.toml asks for nats-py>=2.9, with no upper bound. A nats-py without these members is
used through `Client.publish` (`usable`), only slower; tests/integration/test_nats_pending.py
fails naming the installed nats-py when a member is gone or changed its form.
"""

from __future__ import annotations

import importlib.metadata
import inspect

from nats.aio.client import Client

NATS_PY_VERSION = importlib.metadata.version("nats-py")

# Client's coroutine methods this calls, with the parameters it passes or relies on.
_METHODS: dict[str, tuple[str, ...]] = {"_send_command": ("cmd",), "_flush_pending": ()}
_QUEUE = "_flush_queue"  # set by Client.__init__, an asyncio.Queue once connected

_HAS_METHODS = all(inspect.iscoroutinefunction(getattr(Client, name, None)) for name in _METHODS)


def usable(nc: Client) -> bool:
    """Whether commands can join `nc`'s pending buffer here (else use `Client.publish`)."""
    return _HAS_METHODS and hasattr(nc, _QUEUE)


async def send_command(nc: Client, command: bytes) -> None:
    """Queue `command` (a whole protocol command) on `nc` and wake its flusher if idle."""
    await nc._send_command(command)
    queue = nc._flush_queue
    if queue is not None and queue.empty():
        await nc._flush_pending()


def changes(nc: Client) -> list[str]:
    """How nats-py's Client differs from what `send_command` relies on (empty: not at all),
    each naming the nats-py version; `nc` is a connected client.
    """
    found = []
    for name, needed in _METHODS.items():
        method = getattr(type(nc), name, None)
        if not inspect.iscoroutinefunction(method):
            found.append(f"nats-py {NATS_PY_VERSION}: Client.{name} is no longer a coroutine method")
            continue
        params = list(inspect.signature(method).parameters.values())[1:]  # after self
        given = [p.name for p in params if p.default is p.empty]
        if given != list(needed):
            found.append(f"nats-py {NATS_PY_VERSION}: Client.{name} takes ({', '.join(given)}) "
                         f"where ({', '.join(needed)}) was expected")
    queue = getattr(nc, _QUEUE, "missing")
    if not hasattr(queue, "empty"):
        found.append(f"nats-py {NATS_PY_VERSION}: a connected Client's {_QUEUE} is {queue!r}, "
                     "not a queue")
    return found
