"""A durable pull consumer that keeps pull requests waiting on the server, for the long-running
loops of server, worker and the dead-letter service.

nats-py's `fetch(batch, timeout)` asks for a batch and, once one message of an idle consumer has
arrived, waits for the rest of the batch until its timeout: each step transition after a quiet
moment paid up to that timeout. Here the consumer always has requests outstanding for as many
messages as its owner can take (its *credit*), so the server hands a message over the moment it
is stored, and the owner takes whatever has arrived, without waiting for more.

Credit is given back with `grant(n)` once the owner is done with `n` messages (the worker: when a
command finishes; the router: after a batch is committed), so a worker never holds more commands
than it runs at once and the rest stay for other workers.

The server answers a request that ends with a status message: 408 when it expires and 409 when
it is cut short (leadership change, consumer deleted, ...); both carry how many messages of it
were left unfulfilled, and that credit is requested again. The credit is split in two lanes
whose requests expire at different times (bus/pull_lanes.py), so that one lane's request waits
while the other's is asked again: a message stored at any moment finds a request. Requests also
ask for idle heartbeats: when neither a message nor a heartbeat comes for a while (a reconnect, a
node that went away with our requests), every outstanding request is presumed lost and asked
again.

A consumer with a priority group (the router's partitions, pinned_client policy) names the group
in every request, and, once a delivered message has told it (header `Nats-Pin-Id`), the pin it
holds: nats-server then delivers to this client only, until the pin moves (no request from it for
the consumer's priority_timeout, or `release`); a request with a pin that moved is answered 423,
after which this client asks again without one and waits as a stand-by.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable

from nats.aio.client import Client
from nats.aio.msg import Msg

from noetl_stream.bus.connection import API_PREFIX, Bus
from noetl_stream.bus.delivery import delivery_of
from noetl_stream.bus.pull_lanes import Lane, lane_expiry, lanes_of
from noetl_stream.jsonutil import JsonObject

log = logging.getLogger("noetl_stream.pull")

EXPIRES_S = 30.0
HEARTBEAT_S = 1.0
# A request refused outright (409 without a count: too many waiting requests, ...) is asked
# again after this pause, so a refusal cannot turn into a busy loop.
REFUSED_PAUSE_S = 0.5
# Requests nothing answers (the consumer was deleted: nats-server answers its outstanding
# requests 409 "Consumer Deleted" and new ones not at all) are asked again less and less often,
# up to this pause, until the consumer answers again (it may be created anew).
MAX_PAUSE_S = 30.0
CONSUMER_DELETED = "Consumer Deleted"
PIN_HEADER = "Nats-Pin-Id"
PIN_MISMATCH = "423"
# Turns of the event loop a batch waits at most for the lanes' subscriptions to hand over what
# they have read (each takes one; more only while a subscription's callback is held up).
ORDER_TURNS = 8


class PullConsumer:
    """Messages of one durable pull consumer, delivered as they are stored."""

    def __init__(self, nc: Client, stream: str, durable: str, *, credit: int,
                 api_prefix: str = "$JS.API", expires_s: float = EXPIRES_S,
                 heartbeat_s: float = HEARTBEAT_S, group: str | None = None,
                 on_pinned: Callable[[], None] | None = None) -> None:
        if credit < 1:
            raise ValueError("a pull consumer needs a credit of at least one message")
        self.name = durable
        self._nc = nc
        self._next_subject = f"{api_prefix}.CONSUMER.MSG.NEXT.{stream}.{durable}"
        self._unpin_subject = f"{api_prefix}.CONSUMER.UNPIN.{stream}.{durable}"
        self._group = group
        self.pin: str | None = None  # the pin this client holds, as the server last said
        self._held = False  # requests held back while the pin is handed over
        self._on_pinned = on_pinned  # called when this client takes a pin, before its messages
        self._credit = credit
        self._expires_s = expires_s
        self._heartbeat_s = heartbeat_s
        # Silence, while requests are outstanding, after which they are presumed lost.
        self._lost_after_s = 3 * heartbeat_s
        self._lanes = lanes_of(credit)
        self._epoch = time.monotonic()  # where the lanes' grids of expiry times start
        self._queue: deque[Msg] = deque()
        self._arrived = asyncio.Event()
        self._last_heard = time.monotonic()
        self._watch: asyncio.Task[None] | None = None
        self._retry: asyncio.Task[None] | None = None
        self._closed = False
        self._pause_s = REFUSED_PAUSE_S  # before asking an unanswering consumer again
        self._ask_at = 0.0  # monotonic time before which the liveness watch does not ask again
        self._gone = False  # told the consumer was deleted, and not heard from it since
        self.detach: Callable[[], None] | None = None  # set by open_pull, called by stop

    async def start(self) -> None:
        for lane in self._lanes:
            lane.inbox = self._nc.new_inbox()
            lane.sub = await self._nc.subscribe(lane.inbox, cb=self._on_message_of(lane))
        self._watch = asyncio.create_task(self._watch_liveness(), name=f"pull-{self.name}")
        await self._request()

    async def stop(self) -> None:
        """Stop pulling; messages that arrived and were not taken go back at once (nak)."""
        self._closed = True
        self._arrived.set()
        if self.detach is not None:
            self.detach()
        for task in (self._watch, self._retry):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        # Stopping: a closed connection has dropped the subscription, and a message it cannot
        # nak is redelivered after its ack wait anyway.
        for lane in self._lanes:
            if lane.sub is not None:
                with contextlib.suppress(Exception):
                    await lane.sub.unsubscribe()
                lane.sub = None
        while self._queue:
            with contextlib.suppress(Exception):
                await self._queue.popleft().nak()

    async def next_batch(self, limit: int, timeout_s: float | None = None) -> list[Msg]:
        """Wait for at least one message (up to `timeout_s`), then take up to `limit` of what has
        arrived, without waiting for more; [] on timeout or once stopped.
        """
        while not self._queue and not self._closed:
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), timeout_s)
            except TimeoutError:
                return []
        if len(self._lanes) > 1:
            await self._in_wire_order()
        taken: list[Msg] = []
        while self._queue and len(taken) < limit:
            taken.append(self._queue.popleft())
        return taken

    async def _in_wire_order(self) -> None:
        """Each lane's messages reach the queue through their own subscription's task, so one
        lane's may pass another's that came before it on the connection. What has been read is
        let in first (each subscription hands over what it buffered), then the queue is put in
        the order nats-server delivered it: the consumer's sequence, one count per delivery.
        """
        for _ in range(ORDER_TURNS):
            if not any(lane.sub is not None and lane.sub.pending_msgs for lane in self._lanes):
                break
            await asyncio.sleep(0)
        if len(self._queue) > 1:
            self._queue = deque(sorted(self._queue, key=_delivery_order))

    async def grant(self, n: int = 1) -> None:
        """The owner is done with `n` messages: it can take as many more. The credit returns to
        the lanes whose share the owner holds most of.
        """
        for lane in sorted(self._lanes, key=lambda lane: -lane.room):
            back = min(n, max(lane.room, 0))
            lane.owed += back
            n -= back
        self._lanes[0].owed += n  # more than the owner held: kept, as it was given
        await self._request()

    # -- requests --------------------------------------------------------------------------------
    async def _request(self, *, now: bool = False) -> None:
        for lane in self._lanes:
            await self._request_lane(lane, now=now)

    async def _request_lane(self, lane: Lane, *, now: bool = False) -> None:
        # One request per half of the lane's credit at most, unless nothing of it is outstanding:
        # a message that comes while a request waits is delivered at once either way.
        if self._closed or self._held or lane.owed <= 0:
            return
        if not now and lane.pending > 0 and lane.owed < max(1, lane.credit // 2):
            return
        if self.outstanding == 0:
            # The silence after which requests count as lost starts now: one asked after a
            # quiet spell must not be taken for lost before nats-server could answer it.
            self._last_heard = time.monotonic()
        batch, lane.owed = lane.owed, 0
        lane.pending += batch
        expires_s = lane_expiry(time.monotonic(), self._epoch, self._expires_s, lane.index,
                                len(self._lanes))
        # nats-server refuses a request whose heartbeat is more than half its expiry.
        body: JsonObject = {"batch": batch, "expires": int(expires_s * 1e9),
                            "idle_heartbeat": int(min(self._heartbeat_s, expires_s / 2) * 1e9)}
        if self._group is not None:
            body["group"] = self._group
            if self.pin is not None:
                body["id"] = self.pin
        try:
            await self._nc.publish(self._next_subject, json.dumps(body).encode(),
                                   reply=lane.inbox)
        except Exception as exc:  # a closed or reconnecting connection: ask again later
            log.warning("pull request on %s failed (%s); asking again", self.name, exc)
            lane.pending -= batch
            lane.owed += batch
            self._retry_later()

    def _retry_later(self, pause_s: float = REFUSED_PAUSE_S) -> None:
        if self._retry is None or self._retry.done():
            self._retry = asyncio.create_task(self._request_after(pause_s))

    async def _request_after(self, pause_s: float) -> None:
        await asyncio.sleep(pause_s)
        await self._request(now=True)

    def _on_message_of(self, lane: Lane) -> Callable[[Msg], Awaitable[None]]:
        async def on_message(msg: Msg) -> None:
            await self._on_message(lane, msg)
        return on_message

    async def _on_message(self, lane: Lane, msg: Msg) -> None:
        self._last_heard = time.monotonic()
        status = msg.headers.get("Status") if msg.headers else None
        if status in (None, "100", "408"):
            self._answered()
        if status is None:
            pin = msg.headers.get(PIN_HEADER) if self._group is not None and msg.headers else None
            if pin and pin != self.pin:
                log.info("pull consumer %s: pinned here", self.name)
                self.pin = pin
                if self._on_pinned is not None:
                    self._on_pinned()
            lane.pending = max(0, lane.pending - 1)
            self._queue.append(msg)
            self._arrived.set()
            if lane.pending == 0:
                await self._request_lane(lane)
            return
        if status == "100":  # idle heartbeat (or flow control, unused by pull consumers)
            return
        if status == PIN_MISMATCH:
            # The pin moved to another client: every request naming it is refused; wait as a
            # stand-by with requests that name none.
            if self.pin is not None:
                log.info("pull consumer %s: pin moved to another client", self.name)
            self.pin = None
            lane.owed += lane.pending
            lane.pending = 0
            self._retry_later(0.0)
            return
        left = _pending_count(msg)
        if left is None:
            # Refused without a count (too many waiting requests, ...): presume every
            # outstanding request gone and ask again after a pause.
            self._refused(status, msg.headers.get("Description", "") if msg.headers else "")
            return
        left = min(left, lane.pending)
        lane.pending -= left
        lane.owed += left
        await self._request_lane(lane, now=lane.pending == 0)

    def _answered(self) -> None:
        """The consumer answered (a message, a heartbeat, an expiry): ask at the usual pace."""
        if self._gone:
            log.info("pull consumer %s answers again", self.name)
        self._gone = False
        self._pause_s = REFUSED_PAUSE_S
        self._ask_at = 0.0

    def _backed_off(self) -> float:
        """The pause before the next unanswered ask, doubled for the one after it."""
        pause = self._pause_s
        self._pause_s = min(2 * pause, MAX_PAUSE_S)
        self._ask_at = time.monotonic() + pause
        return pause

    def _refused(self, status: str, description: str) -> None:
        # Refused without a count (too many waiting requests, consumer deleted, ...): presume
        # every outstanding request gone and ask again after a pause.
        if description == CONSUMER_DELETED:
            if not self._gone:
                log.warning("pull consumer %s no longer exists (%s %s): asking again at most "
                            "every %.0f s until it is back", self.name, status, description,
                            MAX_PAUSE_S)
            self._gone = True
        else:
            log.info("pull request on %s refused: %s %s", self.name, status, description)
        self.reset()
        self._retry_later(self._backed_off())

    async def _watch_liveness(self) -> None:
        while not self._closed:
            await asyncio.sleep(self._heartbeat_s)
            now = time.monotonic()
            silent = now - self._last_heard
            if self.outstanding > 0 and silent > self._lost_after_s and now >= self._ask_at:
                log.log(logging.DEBUG if self._gone else logging.INFO,
                        "pull requests on %s unanswered for %.1f s; asking again", self.name,
                        silent)
                self.reset()
                self._backed_off()
                await self._request(now=True)

    @property
    def outstanding(self) -> int:
        """Messages asked for and not yet delivered."""
        return sum(lane.pending for lane in self._lanes)

    async def release(self, hold_s: float, drain_s: float) -> None:
        """Give up this client's pin so that another client waiting on the group gets it: stop
        asking, let the requests that name the pin end (up to `drain_s`; messages they bring are
        delivered as usual), unpin, and ask again as a stand-by only after `hold_s`.
        """
        if self._group is None or self.pin is None or self._held:
            return
        self._held = True
        try:
            deadline = time.monotonic() + drain_s
            while self.outstanding > 0 and time.monotonic() < deadline and not self._closed:
                await asyncio.sleep(0.05)
            self.pin = None
            try:
                await self._nc.request(self._unpin_subject,
                                       json.dumps({"group": self._group}).encode(), timeout=2.0)
            except Exception as exc:  # not unpinned: the pin ends after priority_timeout instead
                log.info("unpinning %s failed (%s); its pin times out instead", self.name, exc)
            await asyncio.sleep(hold_s)
        finally:
            self._held = False
            self.reset()
            await self._request(now=True)

    def reset(self) -> None:
        """Presume every outstanding request lost (after a reconnect, say)."""
        for lane in self._lanes:
            lane.owed += lane.pending
            lane.pending = 0
        self._last_heard = time.monotonic()

    def on_reconnect(self) -> None:
        """The connection came back: requests waiting on the old one may be gone; ask again."""
        if self._closed:
            return
        self.reset()
        self._retry_later(0.0)


def _delivery_order(msg: Msg) -> int:
    delivery = delivery_of(msg)
    return 0 if delivery is None else delivery.consumer_seq


def _pending_count(msg: Msg) -> int | None:
    raw = msg.headers.get("Nats-Pending-Messages") if msg.headers else None
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


async def open_pull(bus: Bus, stream: str, durable: str, *, credit: int,
                    group: str | None = None, expires_s: float = EXPIRES_S,
                    start: bool = True, on_pinned: Callable[[], None] | None = None,
                    ) -> PullConsumer:
    """A pull consumer on `bus` (started unless told otherwise) that asks again whenever the
    connection comes back.
    """
    consumer = PullConsumer(bus.nc, stream, durable, credit=credit,
                            api_prefix=API_PREFIX, group=group,
                            expires_s=expires_s, on_pinned=on_pinned)
    bus.reconnect_listeners.append(consumer.on_reconnect)
    consumer.detach = lambda: _discard(bus.reconnect_listeners, consumer.on_reconnect)
    if start:
        await consumer.start()
    return consumer


def _discard(listeners: list[Callable[[], None]], listener: Callable[[], None]) -> None:
    with contextlib.suppress(ValueError):
        listeners.remove(listener)
