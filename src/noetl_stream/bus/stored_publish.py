"""Publishing to JetStream and waiting for the store's ack, with less work per message than
nats-py's `JetStreamContext.publish`.

nats-py answers each publish through its request machinery: a random token per request (an
`os.urandom` call), `asyncio.wait_for` around the reply, stdlib `json` and a dataclass for the
ack. Outcome events, commands and state commits each pay it once per step. Here one wildcard inbox
per connection takes every ack, a counter names each publish, one timer bounds every wait, and
the ack is read with orjson: about half the CPU per publish (bench/README.md). Headers are
written by bus/wire.py.

Failures are nats-py's own exceptions (`APIError` and its subclasses, `NoStreamResponseError`,
`KeyWrongLastSequenceError`, `TimeoutError`), so callers and bus/dispositions.py classify
them as they did.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import NamedTuple

from nats.aio.client import NO_RESPONDERS_STATUS, Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import errors as js_errors
from nats.js.api import Header

from noetl_stream import jsonutil
from noetl_stream.bus import wire
from noetl_stream.jsonutil import JsonValue

JETSTREAM_TIMEOUT_S = 10.0  # also the JetStream context's (bus/connection.py)
_SLACK_S = 0.001  # a wait ends at most this much before its timeout
# JetStream's error codes for a revision-checked write that found another revision.
_WRONG_LAST_SEQUENCE = (10071, 10164)


class UnansweredWrite(NatsTimeoutError):
    """nats-py's timeout, naming the write JetStream did not answer: what a log says of it is
    then where to look (a stream nats-server no longer writes to, after its disk filled up).
    """

    def __init__(self, subject: str, timeout_s: float) -> None:
        super().__init__()
        self.subject, self.timeout_s = subject, timeout_s

    def __str__(self) -> str:
        return (f"nats: timeout: JetStream answered no write to {self.subject[:200]} within "
                f"{self.timeout_s:g} s (a nats-server whose disk filled up writes to that stream "
                "again only once it is restarted)")


class Stored(NamedTuple):
    """Where a publish is stored: its stream sequence, and whether the stream had it already
    (the same `Nats-Msg-Id` within the duplicate window: `seq` is then the earlier message's).
    """

    seq: int
    duplicate: bool


class StoredPublisher:
    """Publishes on one connection and returns the stream sequence each message was stored at."""

    def __init__(self, nc: Client, timeout_s: float = JETSTREAM_TIMEOUT_S) -> None:
        self._nc = nc
        self._timeout_s = timeout_s
        self._prefix = ""
        self._sub: Subscription | None = None
        self._starting = asyncio.Lock()  # the inbox is subscribed to once
        self._waiting: dict[str, asyncio.Future[Msg]] = {}
        self._sent = 0
        # Every wait's deadline in the order they were given (the timeout is the same for all),
        # and one timer at the earliest: a timer armed and cancelled for each publish cost more
        # than the rest of waiting for its ack.
        self._deadlines: deque[tuple[float, asyncio.Future[Msg], str]] = deque()
        self._timer: asyncio.TimerHandle | None = None

    async def publish(self, subject: str, payload: bytes,
                      headers: dict[str, str] | None = None) -> int:
        """Publish and wait for the ack; the stream sequence (the revision, for a KV key).
        A duplicate (same `Nats-Msg-Id` within the window) returns the stored one's sequence.
        """
        return (await self.store(subject, payload, headers)).seq

    async def store(self, subject: str, payload: bytes,
                    headers: dict[str, str] | None = None) -> Stored:
        """Publish and wait for the ack, which says whether the stream had the message already."""
        return await (await self.send(subject, payload, headers)).stored()

    async def send(self, subject: str, payload: bytes,
                   headers: dict[str, str] | None = None) -> Sent:
        """Write the message to the connection now (no turn of the event loop when connected);
        the returned `Sent` waits for its ack. A caller that sends several messages this way
        writes them all, in order, before waiting for any.
        """
        if self._sub is None:
            await self._start()
        self._sent += 1
        token = str(self._sent)
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[Msg] = loop.create_future()
        self._waiting[token] = answer
        self._expire_later(loop, answer, subject)
        sent = Sent(self._waiting, token, answer)
        try:
            if headers:
                await wire.publish(self._nc, subject, payload, reply=self._prefix + token,
                                   headers=headers)
            else:
                await self._nc.publish(subject, payload, reply=self._prefix + token)
        except BaseException:
            sent.abandon()
            raise
        return sent

    async def update(self, bucket: str, key: str, value: bytes, last: int) -> int:
        """A KV write that succeeds only while the key's revision is `last`; its new revision.
        Raises KeyWrongLastSequenceError as nats-py's `KeyValue.update` does.
        """
        try:
            return await self.publish(f"$KV.{bucket}.{key}", value,
                                      {Header.EXPECTED_LAST_SUBJECT_SEQUENCE: str(last)})
        except js_errors.APIError as exc:
            if exc.err_code in _WRONG_LAST_SEQUENCE:
                raise js_errors.KeyWrongLastSequenceError(description=exc.description) from None
            raise

    async def _start(self) -> None:
        async with self._starting:
            if self._sub is not None:
                return
            self._prefix = self._nc.new_inbox() + "."
            self._sub = await self._nc.subscribe(self._prefix + "*", cb=self._on_ack)

    async def _on_ack(self, msg: Msg) -> None:
        answer = self._waiting.pop(msg.subject[len(self._prefix):], None)
        if answer is not None and not answer.done():
            answer.set_result(msg)

    def _expire_later(self, loop: asyncio.AbstractEventLoop, answer: asyncio.Future[Msg],
                      subject: str) -> None:
        """Fail `answer` with nats-py's TimeoutError once the timeout has passed unanswered."""
        deadlines = self._deadlines
        while deadlines and deadlines[0][1].done():
            deadlines.popleft()  # answered: most acks come in the order of their publishes
        deadlines.append((loop.time() + self._timeout_s, answer, subject))
        if self._timer is None:
            self._timer = loop.call_at(deadlines[0][0], self._expire_due, loop)

    def _expire_due(self, loop: asyncio.AbstractEventLoop) -> None:
        self._timer = None
        # A timer may fire a little before its time (the loop's clock resolution).
        now = loop.time() + _SLACK_S
        deadlines = self._deadlines
        while deadlines and (deadlines[0][0] <= now or deadlines[0][1].done()):
            _, answer, subject = deadlines.popleft()
            if not answer.done():
                answer.set_exception(UnansweredWrite(subject, self._timeout_s))
        if deadlines:
            self._timer = loop.call_at(deadlines[0][0], self._expire_due, loop)


class Sent:
    """A message written to the connection whose ack is still to come."""

    __slots__ = ("_answer", "_token", "_waiting")

    def __init__(self, waiting: dict[str, asyncio.Future[Msg]], token: str,
                 answer: asyncio.Future[Msg]) -> None:
        self._waiting = waiting
        self._token = token
        self._answer = answer

    async def stored(self) -> Stored:
        """Wait for the ack: where the message is stored, or nats-py's error for it."""
        try:
            msg = await self._answer
        finally:
            self.abandon()
        return _stored(msg)

    def abandon(self) -> None:
        """Stop waiting (answered, failed, or given up by the caller): nothing is left behind."""
        self._waiting.pop(self._token, None)
        if not self._answer.done():
            self._answer.cancel()  # nothing to expire


def _stored(msg: Msg) -> Stored:
    if msg.headers and msg.headers.get(Header.STATUS) == NO_RESPONDERS_STATUS:
        raise js_errors.NoStreamResponseError
    try:
        ack: JsonValue = jsonutil.loads(msg.data)
    except ValueError:
        raise js_errors.APIError(description="the store's ack is not JSON") from None
    if not isinstance(ack, dict):
        raise js_errors.APIError(description="the store's ack is not a JSON object")
    error = ack.get("error")
    if isinstance(error, dict):
        js_errors.APIError.from_error(error)  # raises the error's own class
    seq = ack.get("seq")
    if not isinstance(seq, int):
        raise js_errors.APIError(description="the store's ack has no sequence")
    return Stored(seq, ack.get("duplicate") is True)
