"""Which server applies which executions' events: the router's partitions (docs/several-servers.md).

NOETL_ROUTER holds a copy of every event the router acts on, under a subject that carries
nats-server's `partition(n, execution_id)`; each partition has its own durable with a priority
group and the pinned_client policy. Every server pulls on every partition, so nats-server pins
each partition to one of them and hands the pin to another live one when its holder has not asked
for `pin_ttl_s` (a `kill -9`, a frozen process). One server at a time thus owns an execution, and
the revision check of its state stays the safety net for the moments a pin moves.

Where the pins go is a matter of balance only, never of correctness. Each server announces itself
in KV `noetl_runtime` (the heartbeats every process writes) and reads who else is there; for that
set of live servers, each partition has one preferred server (rendezvous hashing of server id and
partition, with at most ceil(partitions / servers) each). A server asks for the partitions it
prefers at once and for the others a moment later, and gives up (unpins) a pin it holds on a
partition another live server prefers. A server that is gone but whose heartbeat has not expired
yet is given a partition once at most per heartbeat of it: if it does not take it, the pin comes
back here after a one-second hold.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections import Counter
from collections.abc import Callable

from nats.aio.msg import Msg
from nats.js.errors import KeyNotFoundError

from noetl_stream import jsonutil
from noetl_stream.bus.connection import API_PREFIX, Bus
from noetl_stream.bus.delivery import delivery_of
from noetl_stream.bus.heartbeats import HEARTBEAT_S, RUNTIME_BUCKET, Heartbeat
from noetl_stream.bus.pull import PullConsumer, open_pull
from noetl_stream.bus.stopping import stop_task
from noetl_stream.jsonutil import JsonObject
from noetl_stream.state.kv_keys import bucket_keys

log = logging.getLogger("noetl_stream.partitions")

BATCH = 64  # events of one partition applied and committed as one batch at most
CREDIT = 2 * BATCH  # asked for ahead per partition: the next batch arrives during this one
BALANCE_S = 5.0  # how often a server looks at who else is there
STANDBY_DELAY_S = 1.0  # at start, partitions another server prefers are asked for this late
HOLD_S = 1.0  # after unpinning, how long a server lets the preferred one take the pin
FRESH_S = 2.5 * HEARTBEAT_S  # a heartbeat older than this is a server that is gone
SERVER_ROLE = "server"
SERVER_POOL = "router"
SOURCE_HEADER = "Nats-Stream-Source"


def preferred_servers(partitions: int, servers: list[str]) -> dict[int, str]:
    """Each partition's preferred server among `servers`: the one with the highest rendezvous
    score that has fewer than ceil(partitions / servers) partitions so far. Every server computes
    the same answer from the same set, and a server joining or leaving moves few partitions.
    """
    if not servers:
        return {}
    cap = -(-partitions // len(servers))
    load: Counter[str] = Counter()
    chosen: dict[int, str] = {}
    for partition in range(partitions):
        for server in sorted(servers, key=lambda s: _score(s, partition), reverse=True):
            if load[server] < cap:
                chosen[partition] = server
                load[server] += 1
                break
    return chosen


def partition_of(execution_id: str, partitions: int) -> int:
    """The partition nats-server's `partition(n, 1)` gives an execution id: FNV-1a (32 bits) of
    the token, modulo n.
    """
    h = 0x811C9DC5
    for byte in execution_id.encode():
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return h % partitions


def _score(server: str, partition: int) -> int:
    return int.from_bytes(hashlib.sha256(f"{server}/{partition}".encode()).digest()[:8], "big")


def origin_sequence(msg: Msg) -> int | None:
    """The events stream's sequence of an event, also for its copy in the router's stream
    (header `Nats-Stream-Source: <stream> <seq> ...`): listeners remember the signals they heard
    by it, and a copy made again (an upgrade, a restore) must count as the same signal.
    """
    source = msg.headers.get(SOURCE_HEADER) if msg.headers else None
    if source:
        # `<stream> <seq> <the source's subject transforms>`: the transforms run to a kilobyte.
        parts = source.split(" ", 2)
        if len(parts) > 1 and parts[1].isdigit():
            return int(parts[1])
    delivery = delivery_of(msg)
    return None if delivery is None else delivery.stream_seq  # None: not from JetStream


class RouterPartitions:
    """A server's pull consumers on the router's partitions, and the balance of their pins."""

    def __init__(self, bus: Bus, on_pinned: Callable[[int], None] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.bus = bus
        # nats-server's time (server/nats_clock.py): servers whose hosts' clocks differ still
        # agree on whose heartbeat is fresh.
        self.clock = clock
        # Told a partition's number when this server takes its pin: states of its executions
        # cached before then may have been moved by the server that held it meanwhile.
        self._on_pinned = on_pinned
        self.router = bus.topology.router_decl()
        self.heartbeat = Heartbeat(bus, role=SERVER_ROLE, pool=SERVER_POOL, load=self._load,
                                   clock=clock)
        self.server_id = self.heartbeat.instance
        self.consumers: list[PullConsumer] = []
        # partition -> (server, its heartbeat time) it was last handed to
        self._handed: dict[int, tuple[str, float]] = {}
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> list[PullConsumer]:
        await self.heartbeat.start()
        preferred = preferred_servers(self.router.partitions, sorted(await self._live_servers()))
        # Requests must come more often than the pin's TTL, or an idle holder loses its pin.
        expires_s = self.router.pin_ttl_s * 0.4
        later: list[PullConsumer] = []
        for partition in range(self.router.partitions):
            consumer = await open_pull(self.bus, self.router.stream,
                                       self.router.durable_of(partition), credit=CREDIT,
                                       group=self.router.group, expires_s=expires_s, start=False,
                                       on_pinned=self._pinned_callback(partition))
            self.consumers.append(consumer)
            if preferred.get(partition) == self.server_id:
                await consumer.start()
            else:
                later.append(consumer)
        self._tasks = [asyncio.create_task(self._start_later(later), name="router-standby"),
                       asyncio.create_task(self._balance(), name="router-balance")]
        return self.consumers

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            await stop_task(task)
        held = [c for c in self.consumers if c.pin is not None]
        for consumer in self.consumers:
            await consumer.stop()
        # Leaving: the others take these partitions now rather than after the pin's TTL.
        for consumer in held:
            with contextlib.suppress(Exception):
                await self.bus.nc.request(
                    f"{API_PREFIX}.CONSUMER.UNPIN."
                    f"{self.router.stream}.{consumer.name}",
                    jsonutil.dumps({"group": self.router.group}), timeout=1.0)
        self.consumers = []
        await self.heartbeat.stop()

    def _pinned_callback(self, partition: int) -> Callable[[], None] | None:
        on_pinned = self._on_pinned
        if on_pinned is None:
            return None
        return lambda: on_pinned(partition)

    def held(self) -> list[int]:
        """The partitions this server holds the pin of, as far as it knows."""
        return [p for p, c in enumerate(self.consumers) if c.pin is not None]

    def _load(self) -> JsonObject:
        return {"partitions": [*self.held()]}

    async def _start_later(self, consumers: list[PullConsumer]) -> None:
        await asyncio.sleep(STANDBY_DELAY_S)
        for consumer in consumers:
            await consumer.start()

    async def _balance(self) -> None:
        # The first round comes soon: servers started together each saw only itself at start
        # and asked for every partition, so the first events pinned them at random.
        pause = 2 * STANDBY_DELAY_S
        while True:
            await asyncio.sleep(pause)
            pause = BALANCE_S
            try:
                await self._hand_over()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # NATS away for a moment: balance is not urgent
                log.debug("router partitions not balanced this round: %s", exc)

    async def _hand_over(self) -> None:
        """Unpin the partitions this server holds that another live server prefers."""
        live = await self._live_servers()
        live.setdefault(self.server_id, self.clock())
        preferred = preferred_servers(self.router.partitions, sorted(live))
        releases = []
        for partition, consumer in enumerate(self.consumers):
            owner = preferred.get(partition)
            if consumer.pin is None or owner is None or owner == self.server_id:
                continue
            if self._handed.get(partition) == (owner, live[owner]):
                continue  # handed to it at this heartbeat already and it did not take it
            self._handed[partition] = (owner, live[owner])
            log.info("router partition %d handed to server %s", partition, owner)
            releases.append(consumer.release(HOLD_S, drain_s=self.router.pin_ttl_s * 0.5))
        await asyncio.gather(*releases)

    async def _live_servers(self) -> dict[str, float]:
        """Server id -> time of its last heartbeat, for servers whose heartbeat is fresh."""
        kv = await self.bus.js.key_value(RUNTIME_BUCKET)
        head = f"{SERVER_ROLE}.{SERVER_POOL}."
        now = self.clock()
        live: dict[str, float] = {}
        for key in await bucket_keys(self.bus.js, RUNTIME_BUCKET, f"{head}>"):
            try:
                entry = await kv.get(key)
            except KeyNotFoundError:
                continue
            # A beat that does not decode counts as stale (it must not stop the balancing).
            beat = jsonutil.loads_object(entry.value or b"{}") or {}
            stamp = beat.get("heartbeat_at")
            at = float(stamp) if isinstance(stamp, (int, float)) else 0.0
            if now - at < FRESH_S:
                live[key[len(head):]] = at
        live.setdefault(self.server_id, now)
        return live
