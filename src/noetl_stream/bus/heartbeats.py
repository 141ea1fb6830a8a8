"""Process heartbeats in KV `noetl_runtime`: who is alive, in which pool, doing how much.

Each running worker (or server) keeps one key `<role>.<pool>.<instance>` up to date every
HEARTBEAT_S; the bucket's TTL removes the key of a process that died without saying goodbye, so
the bucket lists live processes. `/metrics` reads it for the worker heartbeat series.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable

from nats.js.errors import KeyNotFoundError

from noetl_stream import jsonutil
from noetl_stream.bus.connection import Bus
from noetl_stream.bus.stopping import stop_task
from noetl_stream.jsonutil import JsonObject, JsonValue
from noetl_stream.state.kv_keys import bucket_keys
from noetl_stream.state.records import Skips, read_each

log = logging.getLogger("noetl_stream.heartbeats")

RUNTIME_BUCKET = "noetl_runtime"
HEARTBEAT_S = 10.0


def instance_id() -> str:
    """host-pid-random: unique per process, readable in a key listing."""
    host = "".join(c if c.isalnum() or c in "-_" else "-" for c in socket.gethostname())[:40]
    return f"{host}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


class Heartbeat:
    """Publishes `{role, pool, instance, pid, started_at, heartbeat_at, **load()}` periodically."""

    def __init__(self, bus: Bus, *, role: str, pool: str,
                 load: Callable[[], JsonObject] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.bus = bus
        # Servers pass nats-server's clock: they compare each other's beats with it.
        self._clock = clock
        self.instance = instance_id()
        self.key = f"{role}.{pool}.{self.instance}"
        self._base = {"role": role, "pool": pool, "instance": self.instance, "pid": os.getpid(),
                      "started_at": clock()}
        self._load = load or dict
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._kv = await self.bus.js.key_value(RUNTIME_BUCKET)
        try:
            await self._beat()
        except Exception as exc:
            # Heartbeats are for operators; a user not allowed to write them still does its work.
            log.warning("heartbeat %s not written (%s); /metrics will not list this process",
                        self.key, exc)
        self._task = asyncio.create_task(self._loop(), name=f"heartbeat-{self.key}")

    async def stop(self) -> None:
        if self._task is not None:
            await stop_task(self._task)
            self._task = None
            with contextlib.suppress(Exception):  # leaving: the TTL removes it anyway
                await self._kv.delete(self.key)

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_S)
            try:
                await self._beat()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # NATS away for a moment: the next beat tries again; a missed one is harmless.
                log.debug("heartbeat %s not written: %s", self.key, exc)

    async def _beat(self) -> None:
        body = {**self._base, "heartbeat_at": self._clock(), **self._load()}
        await self._kv.put(self.key, jsonutil.dumps(body))


async def live_processes(bus: Bus, skips: Skips | None = None) -> list[JsonObject]:
    """The heartbeat entries currently in the bucket (one per live process). An entry that is
    not a heartbeat (not a JSON object with a text `role` and `pool`) is left out and named in
    `skips` (and logged).
    """
    kv = await bus.js.key_value(RUNTIME_BUCKET)

    async def read(key: str) -> JsonObject | None:
        try:
            entry = await kv.get(key)
        except KeyNotFoundError:  # deleted or expired since the listing
            return None
        if not entry.value:
            return None
        value: JsonValue = jsonutil.loads(entry.value)
        if not isinstance(value, dict) or not all(isinstance(value.get(f), str)
                                                  for f in ("role", "pool")):
            raise ValueError("not a heartbeat: a JSON object with text `role` and `pool` expected")
        return value

    keys = await bucket_keys(bus.js, RUNTIME_BUCKET)
    return await read_each(keys, read, skips if skips is not None else Skips("heartbeat"))
