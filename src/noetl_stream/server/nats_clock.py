"""nats-server's time, as the server's router reads it (`now`).

Durable timers are NATS message schedules: nats-server fires `@at <time>` on its own clock, so a
deadline must be computed on that clock too. A server whose clock is an hour behind would
otherwise set every timer an hour in the past (a 30 s step timeout fires at once), and one an
hour ahead would set them an hour late (a hung step is not failed for an hour).

The clock reads nats-server's time from a JetStream API answer (`ts` of a stream's info) and
carries it forward on the local monotonic clock, which no change of the wall clock bends; it
reads it again every RESYNC_S to follow a slow drift between the two machines. Until the first
reading, and if a reading fails, it goes on from the last one (or from the local wall clock
before any).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from datetime import UTC, datetime

from noetl_stream.bus.connection import Bus

log = logging.getLogger("noetl_stream.nats_clock")

RESYNC_S = 60.0
API_TIMEOUT_S = 5.0
_TS = re.compile(r"^(?P<base>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(?P<frac>\d+))?"
                 r"(?P<zone>Z|[+-]\d\d:\d\d)$")


def parse_ts(text: str) -> float:
    """RFC3339 with up to nanoseconds (as nats-server writes it) -> POSIX seconds."""
    m = _TS.match(text)
    if m is None:
        raise ValueError(f"not an RFC3339 time: {text!r}")
    zone = "+00:00" if m["zone"] == "Z" else m["zone"]
    seconds = datetime.fromisoformat(m["base"] + zone).astimezone(UTC).timestamp()
    frac = m["frac"] or "0"
    return seconds + int(frac) / float(10 ** len(frac))


class NatsClock:
    """A `() -> float` clock of POSIX seconds on nats-server's time."""

    def __init__(self, bus: Bus, stream: str) -> None:
        self.bus = bus
        self.stream = stream
        self._base: tuple[float, float] | None = None  # (nats-server seconds, local monotonic)

    def __call__(self) -> float:
        if self._base is None:
            return time.time()
        nats_s, at = self._base
        return nats_s + (time.monotonic() - at)

    async def sync(self) -> None:
        """Read nats-server's time; the answer's latency is split evenly between the two ways."""
        before = time.monotonic()
        reply = await self.bus.nc.request(f"$JS.API.STREAM.INFO.{self.stream}", b"",
                                          timeout=API_TIMEOUT_S)
        after = time.monotonic()
        ts = json.loads(reply.data).get("ts")
        if not isinstance(ts, str):
            raise ValueError(f"stream info of {self.stream} carries no `ts` (nats-server < 2.10?)")
        self._base = (parse_ts(ts), (before + after) / 2)
        log.debug("nats-server time is %.3f s off this host's", self() - time.time())

    async def first_sync(self) -> None:
        """`sync` at start; a nats-server that does not say its time leaves this host's clock."""
        try:
            await self.sync()
        except ValueError as exc:
            log.warning("timers follow this host's clock, not nats-server's: %s", exc)

    async def keep_in_sync(self) -> None:
        while True:
            await asyncio.sleep(RESYNC_S)
            try:
                await self.sync()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # NATS away a moment: the last reading carries on
                log.debug("nats-server time not read: %s", exc)
