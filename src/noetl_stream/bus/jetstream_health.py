"""Why nats-server's JetStream answers nothing, in words a user can act on.

A nats-server whose store meets "no space left on device" while writing to a stream either
stops writing to that stream (it answers no publish to it until it is restarted) or, when the
write came from a stream's sourcing, disables JetStream as a whole ("JetStream out of space,
will be DISABLED" in its log); it does not enable it again once space is back. Every JetStream
request then goes unanswered, and a process sees only "nats: timeout". A command that meets a
timeout asks here whether JetStream answers at all, so it can say which of the two it met.
"""

from __future__ import annotations

from nats.aio.client import Client
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError

from noetl_stream import jsonutil

PROBE_TIMEOUT_S = 2.0
DISABLED = ("nats-server's JetStream is disabled (nats-server disables it when a write finds its "
            'store\'s disk full: "JetStream out of space, will be DISABLED" in its log); free '
            "space and restart nats-server: executions go on from their stored state")


async def jetstream_trouble(nc: Client) -> str | None:
    """What is wrong with JetStream on `nc`'s nats-server, or None when it answers."""
    try:
        reply = await nc.request("$JS.API.INFO", b"", timeout=PROBE_TIMEOUT_S)
    except NoRespondersError:
        return DISABLED
    except (NatsTimeoutError, TimeoutError):
        return (f"nats-server is connected but its JetStream answered no request within "
                f"{PROBE_TIMEOUT_S:g} s; if its log shows \"no space left on device\", free "
                "space and restart nats-server")
    try:
        body = jsonutil.loads(reply.data)
    except ValueError:
        return None
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return None
    description = str(error.get("description", error))
    if "not enabled" in description.lower():
        return DISABLED
    return f"nats-server's JetStream refuses requests: {description}"
