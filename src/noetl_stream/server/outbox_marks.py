"""Which committed outbox has gone out, so a state read cold publishes only what may not have.

The server commits a state with the messages it implies (its outbox) and publishes them after. A
server that reads the state cold (its start, a partition's pin moving here, a cache eviction, a
revision conflict) cannot tell from the state whether the committer published before it
stopped, and a copy published after the streams' duplicate window is stored again: a command
would reach a worker twice. So once an outbox has been published the server marks it: KV
`noetl_step_results`, key `<execution_id>.outbox`, holds `{"revision": N}` (and its format's
`schema_version`), the revision whose outbox went out. A
state read cold at the marked revision is not published again. One without the mark (its
committer stopped between the publish and the mark) is: inside the window the streams drop the
copies; after it a command's copy meets its attempt's claim (worker/attempt_claims.py) and is
acknowledged without running, and an event's copy is stored once more, which the router ignores
(its run is no longer in flight).

The mark is a plain publish (no round trip), sent after the outbox on the same connection, so
NATS stores it after the messages it vouches for. It lives beside the execution's step results
and goes with them (purged by key prefix).
"""

from __future__ import annotations

import logging

from nats.js.errors import KeyNotFoundError
from nats.js.kv import KeyValue

from noetl_stream import jsonutil
from noetl_stream.bus.connection import Bus
from noetl_stream.bus.publish import publish_outbox
from noetl_stream.formats import OUTBOX_MARK
from noetl_stream.router.state import Outgoing
from noetl_stream.state.step_results import BUCKET

log = logging.getLogger("noetl_stream.server")


def mark_key(execution_id: str) -> str:
    return f"{execution_id}.outbox"


class OutboxMarks:
    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self._kv: KeyValue | None = None

    async def publish(self, execution_id: str, revision: int, outbox: list[Outgoing],
                      trace_headers: dict[str, str] | None, *, again: bool = False) -> None:
        """Publish the outbox committed at `revision` (`again`: after a cold read), then mark it
        published.
        """
        await publish_outbox(self.bus, outbox, trace_headers, again=again)
        if outbox:
            await self.bus.nc.publish(f"$KV.{BUCKET}.{mark_key(execution_id)}",
                                      jsonutil.dumps(OUTBOX_MARK.stamp({"revision": revision})))

    async def republish(self, execution_id: str, revision: int, outbox: list[Outgoing],
                        trace_headers: dict[str, str] | None) -> None:
        """A state read cold: its outbox again, unless the mark says it went out."""
        if not outbox or await self.published(execution_id, revision):
            return
        log.info("outbox of %s at revision %d not marked published: publishing it again",
                 execution_id, revision)
        await self.publish(execution_id, revision, outbox, trace_headers, again=True)

    async def published(self, execution_id: str, revision: int) -> bool:
        if self._kv is None:
            self._kv = await self.bus.js.key_value(BUCKET)
        try:
            entry = await self._kv.get(mark_key(execution_id))
        except KeyNotFoundError:
            return False
        mark = jsonutil.loads_object(entry.value or b"")
        # A mark this release cannot read vouches for nothing: publishing again is safe.
        if mark is None or OUTBOX_MARK.is_newer(mark):
            return False
        return bool(OUTBOX_MARK.read(mark).get("revision") == revision)
