"""Reading a filtered slice of a stream live, in order and once, through consumers we name ourselves.

`EventFeed` is how every reader follows an execution's events (`watch`, `run`, SSE, a
sub-playbook waiting for its child). It creates an ephemeral push consumer named `watch_<hex>`
through the named create subject `$JS.API.CONSUMER.CREATE.<stream>.<name>.<filter>`, on which
nats-server checks the name and filter in the body against the subject. So a user granted only
that form can never create or update another consumer, such as the router's durable (nats-py's
ordered consumers use the unnamed form, whose body may carry any name).

Invariants:
- The caller sees each stream sequence at most once, in increasing order: the feed tracks the
  last sequence it handed out and drops anything at or below it.
- The feed survives the loss of its consumer (its node killed, nats-server restarted, messages
  lost while the connection moved to another node): no message and no idle heartbeat for a few
  heartbeat intervals, a gap in the consumer sequence, or an error status from the server, and it
  creates a new consumer (new name, new inbox) starting at the last sequence + 1. Until that
  succeeds it retries; the caller only sees a pause.
- An abandoned consumer needs no delete (restricted users may not send one): without interest on
  its inbox the server removes it after `inactive_threshold`.

A wait for a delivery arms no timer of its own: one watchdog timer, re-armed when it rings,
tells a wait that lasted the limit. Nearly every delivery of a live execution is waited for, and
in `run` the loop is shared with the server and the worker, which a timer set and cancelled per
delivery would cost a little of each step.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.errors import ConnectionClosedError
from nats.errors import Error as NatsError
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, Header

from noetl_stream.bus.delivery import delivery_of
from noetl_stream.bus.jetstream_health import jetstream_trouble
from noetl_stream.errors import InfrastructureError

EVENTS_STREAM = "NOETL_EVENTS"
CONSUMER_PREFIX = "watch_"
IDLE_HEARTBEAT = timedelta(seconds=2)
INACTIVE_THRESHOLD = timedelta(seconds=10)
MISSED_HEARTBEATS = 3  # this many intervals without a word from the consumer and it is gone
CREATE_TIMEOUT_S = 5.0
RETRY_MAX_S = 2.0
WARN_AFTER_FAILURES = 3  # consumer creates failed in a row before a follower says why
QUEUE_SIZE = 256  # a slow reader holds the pump back, and flow control then holds the server back
_CONTROL = "100"

log = logging.getLogger("noetl_stream.event_feed")


class _End:
    """Queued once the feed can deliver no more (the connection closed)."""


_END = _End()


class EventFeed:
    """The messages of `stream` on `filter_subject` with a sequence above `after_seq`, live.

    Either give `on_msg` (awaited for each message, in order) or read with `get()` /
    `async for`. `start()` creates the first consumer and raises when it cannot (no such
    stream, no permission); later losses are repaired without the caller noticing.
    """

    def __init__(self, nc: Client, filter_subject: str, *, stream: str = EVENTS_STREAM,
                 after_seq: int = 0, on_msg: Callable[[Msg], Awaitable[None]] | None = None,
                 idle_heartbeat: timedelta = IDLE_HEARTBEAT,
                 inactive_threshold: timedelta = INACTIVE_THRESHOLD) -> None:
        self._nc = nc
        self._js = nc.jetstream(timeout=CREATE_TIMEOUT_S)
        self.stream = stream
        self.filter_subject = filter_subject
        self._last_seq = max(after_seq, 0)
        self._on_msg = on_msg
        self._heartbeat_s = idle_heartbeat.total_seconds()
        self._inactive_s = inactive_threshold.total_seconds()
        self._queue: asyncio.Queue[Msg | _End] = asyncio.Queue(QUEUE_SIZE)
        # What the current consumer delivered, not yet taken; a new consumer gets a new one, so
        # late deliveries of a replaced consumer are never read.
        self._inbox: asyncio.Queue[Msg | None] = asyncio.Queue()
        self._sub: Subscription | None = None
        self._waiting_since: float | None = None  # loop time the pump began waiting, if it waits
        self._watchdog: asyncio.TimerHandle | None = None
        self._stopped = False
        self._consumer_seq = 0
        self._pump: asyncio.Task[None] | None = None
        self.consumer_name: str | None = None
        self.renewals = 0  # consumers created after the first, for logs and tests

    @property
    def last_seq(self) -> int:
        """The stream sequence of the last message handed out (or `after_seq`)."""
        return self._last_seq

    async def start(self) -> None:
        await self._create()
        self._pump = asyncio.create_task(self._run(), name=f"event-feed {self.filter_subject}")

    async def stop(self) -> None:
        self._stopped = True
        if self._watchdog is not None:
            self._watchdog.cancel()
        pump, self._pump = self._pump, None
        await self._drop_subscription()
        if pump is not None:
            # nats-py waits for API replies with asyncio.wait_for, which on Python 3.11 can
            # swallow a cancel that races the reply; the pump also stops at `_stopped`.
            while not pump.done():
                pump.cancel()
                await asyncio.wait({pump}, timeout=0.1)
            with contextlib.suppress(asyncio.CancelledError):
                pump.result()
            await self._drop_subscription()  # one a swallowed cancel let the pump create

    async def __aenter__(self) -> EventFeed:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    async def get(self) -> Msg:
        """The next message; raises InfrastructureError once the connection has closed."""
        item = await self._queue.get()
        if isinstance(item, _End):
            self._queue.put_nowait(item)  # every later get() ends too
            raise InfrastructureError(f"following {self.filter_subject}: the NATS connection closed")
        return item

    def __aiter__(self) -> AsyncIterator[Msg]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Msg]:
        while True:
            try:
                msg = await self.get()
            except InfrastructureError:
                return
            yield msg

    def _config(self, name: str, inbox: str) -> ConsumerConfig:
        config = ConsumerConfig(
            name=name, deliver_subject=inbox, filter_subject=self.filter_subject,
            ack_policy=AckPolicy.NONE, flow_control=True, idle_heartbeat=self._heartbeat_s,
            inactive_threshold=self._inactive_s, mem_storage=True, num_replicas=1)
        if self._last_seq <= 0:
            config.deliver_policy = DeliverPolicy.ALL
        else:
            config.deliver_policy = DeliverPolicy.BY_START_SEQUENCE
            config.opt_start_seq = self._last_seq + 1
        return config

    async def _create(self) -> None:
        name = f"{CONSUMER_PREFIX}{secrets.token_hex(8)}"
        subject = self._nc.new_inbox()
        inbox: asyncio.Queue[Msg | None] = asyncio.Queue()

        async def deliver(msg: Msg) -> None:
            inbox.put_nowait(msg)  # bounded by flow control: we answer it only once taken

        # Interest first, so the consumer's first deliveries have somewhere to go.
        sub = await self._nc.subscribe(subject, cb=deliver)
        try:
            await self._js.add_consumer(self.stream, self._config(name, subject),
                                        timeout=CREATE_TIMEOUT_S)
        except BaseException:
            # Whatever stops the consumer's creation (a refusal, a timeout, cancellation), the
            # subscription made for it must not stay behind; the error goes on as it was.
            with contextlib.suppress(NatsError):
                await sub.unsubscribe()
            raise
        self._sub, self._inbox, self.consumer_name, self._consumer_seq = sub, inbox, name, 0

    async def _drop_subscription(self) -> None:
        sub, self._sub = self._sub, None
        if sub is not None:
            with contextlib.suppress(NatsError):
                await sub.unsubscribe()

    async def _renew(self, reason: str) -> None:
        """A new consumer from the last sequence + 1; retries until one is created."""
        log.info("event feed %s: consumer %s lost (%s); re-creating it from sequence %d",
                 self.filter_subject, self.consumer_name, reason, self._last_seq + 1)
        await self._drop_subscription()
        delay, failures = 0.05, 0
        while not self._stopped:
            if self._nc.is_closed or self._nc.is_draining:
                raise ConnectionClosedError  # shutting down: nothing left to follow
            try:
                await self._create()
            except (NatsError, TimeoutError) as exc:
                # A cluster electing new leaders, or our connection moving to another node.
                log.debug("event feed %s: create failed: %r", self.filter_subject, exc)
                failures += 1
                if failures == WARN_AFTER_FAILURES:  # not a moment's election: say why, once
                    trouble = await jetstream_trouble(self._nc)
                    log.warning("cannot follow the events of %s (%s)%s", self.filter_subject,
                                exc or type(exc).__name__, f": {trouble}" if trouble else "")
                await asyncio.sleep(delay)
                delay = min(delay * 2, RETRY_MAX_S)
                continue
            self.renewals += 1
            return

    async def _run(self) -> None:
        try:
            while not self._stopped:
                msg = await self._next()
                if msg is None:
                    if not self._stopped:
                        await self._renew(f"no message or heartbeat in "
                                          f"{self._heartbeat_s * MISSED_HEARTBEATS:g}s")
                    continue
                problem = await self._take(msg)
                if problem is not None and not self._stopped:
                    await self._renew(problem)
        except ConnectionClosedError:
            log.debug("event feed %s: connection closed", self.filter_subject)
        except asyncio.CancelledError:
            raise
        except Exception:
            # The pump's boundary: a bug here must end the feed visibly, not hang its reader.
            log.exception("event feed %s failed", self.filter_subject)
        if not self._stopped:
            await self._queue.put(_END)

    async def _next(self) -> Msg | None:
        """The next delivery, or None when neither it nor a heartbeat came within the limit
        (MISSED_HEARTBEATS intervals from the start of this wait).
        """
        try:
            return self._inbox.get_nowait()
        except asyncio.QueueEmpty:
            pass
        loop = asyncio.get_running_loop()
        self._waiting_since = loop.time()
        if self._watchdog is None:
            self._watchdog = loop.call_later(self._limit_s, self._watch)
        try:
            return await self._inbox.get()  # None: the watchdog saw the limit pass
        finally:
            self._waiting_since = None

    @property
    def _limit_s(self) -> float:
        return self._heartbeat_s * MISSED_HEARTBEATS

    def _watch(self) -> None:
        """The watchdog: wake a wait that has lasted the limit with None, and ring again when
        the current wait (or one starting now) would reach it.
        """
        loop = asyncio.get_running_loop()
        since = self._waiting_since
        left = self._limit_s if since is None else since + self._limit_s - loop.time()
        if left <= 0:
            self._waiting_since = None  # told once; the next wait starts its own limit
            self._inbox.put_nowait(None)
            left = self._limit_s
        self._watchdog = None if self._stopped else loop.call_later(left, self._watch)

    async def _take(self, msg: Msg) -> str | None:
        """Handle one delivery; returns why the consumer must be replaced, or None."""
        headers = msg.headers or {}
        status = headers.get(Header.STATUS)
        if status == _CONTROL:
            # Flow control: answered once everything before it has been taken. A lost answer
            # is asked for again (a stalled heartbeat), or the consumer is replaced.
            answer = msg.reply or headers.get(Header.CONSUMER_STALLED)
            if answer:
                with contextlib.suppress(NatsError):
                    await self._nc.publish(answer)
            if msg.reply:
                return None
            last = headers.get(Header.LAST_CONSUMER)
            if last is not None and int(last) != self._consumer_seq:
                return f"heartbeat says {last} delivered, we saw {self._consumer_seq}"
            return None
        if status:
            return f"status {status} {headers.get(Header.DESCRIPTION, '')}".strip()
        delivery = delivery_of(msg)
        if delivery is None:
            return f"a message on {msg.subject[:200]} is not a JetStream delivery"
        if delivery.consumer_seq != self._consumer_seq + 1:
            return f"expected delivery {self._consumer_seq + 1}, got {delivery.consumer_seq}"
        self._consumer_seq = delivery.consumer_seq
        if delivery.stream_seq <= self._last_seq:
            return None
        self._last_seq = delivery.stream_seq
        if self._on_msg is not None:
            await self._on_msg(msg)
        else:
            await self._queue.put(msg)
        return None


def event_follower(nc: Client) -> Callable[[str, Callable[[Msg], Awaitable[None]]], EventFeed]:
    """The `follow_events` a worker hands its tools (tools/base.py ToolServices): each call makes
    an EventFeed on `nc`, not yet started.
    """
    def follow(filter_subject: str, on_msg: Callable[[Msg], Awaitable[None]]) -> EventFeed:
        return EventFeed(nc, filter_subject, on_msg=on_msg)

    return follow
