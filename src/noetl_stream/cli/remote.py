"""A client of the HTTP API (docs/api.md): what CLI commands use instead of NATS under --server.

`ApiClient.request` sends JSON and turns every answer other than a success into one
`RemoteError`: a one-line message naming the status and the server's own message, and an
`exit_code` that follows cli/common.py (2 for a request the server refused: bad input, unknown
execution, not authenticated or not allowed; 3 when the server fails). A server that cannot be
reached is an `InfrastructureError`, like an unreachable NATS.

`ApiClient.events` follows an execution's Server-Sent Events. Each frame's `id` is its events
stream sequence; when the connection drops, the client reconnects with `Last-Event-ID`, so the
server continues after the last frame seen and nothing is lost or repeated.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TypeVar
from urllib.parse import quote

import aiohttp
from pydantic import BaseModel, ValidationError

from noetl_stream import config, jsonutil
from noetl_stream.cli.common import EXIT_INFRA, EXIT_REJECTED
from noetl_stream.errors import InfrastructureError, NoetlStreamError
from noetl_stream.jsonutil import JsonValue
from noetl_stream.subjects import TERMINAL_EXECUTION_EVENTS

END_EVENTS = frozenset({*TERMINAL_EXECUTION_EVENTS, "execution.rejected"})
RESTARTED = "execution.restarted"  # reopens an ended execution: a later end follows
# Starting an execution waits up to 10 s for the server's answer (docs/api.md); leave room.
REQUEST_TIMEOUT_S = 60.0
# The stream has no end in time, but the server sends a keepalive after 15 s of silence: a
# connection quiet for much longer is dead, and reconnecting finds out sooner than TCP would.
# (Built per request, not here: the first read of aiohttp imports it, deferred_imports.py.)
STREAM_CONNECT_S, STREAM_READ_S = 15.0, 45.0
RECONNECTS = 8
NOT_AUTHENTICATED = f"not authenticated: pass --token or set {config.ENV_TOKEN}"
TOKEN_REFUSED = (f"token refused: the server does not accept the token given (--token or "
                 f"{config.ENV_TOKEN}); it is unknown, expired or revoked")

M = TypeVar("M", bound=BaseModel)


class RemoteError(NoetlStreamError):
    """The server answered with an error (`{"error": {"code", "message", "details"}}`)."""

    def __init__(self, status: int, code: str, message: str, details: JsonValue = None, *,
                 token_sent: bool = False) -> None:
        self.status = status
        self.code = code
        self.message = message
        self.details = details
        # A 401 to a request that carried a token is not cured by passing one.
        unauthenticated = TOKEN_REFUSED if token_sent else NOT_AUTHENTICATED
        super().__init__(f"{unauthenticated} (server answered 401: {message})" if status == 401
                         else f"server answered {status} {code}: {message}")

    @property
    def exit_code(self) -> int:
        return EXIT_INFRA if self.status >= 500 else EXIT_REJECTED

    def reasons(self) -> list[str]:
        """The lines that say why a playbook or request was refused, when the server gave them."""
        details = self.details
        errors = details.get("errors") if isinstance(details, dict) else None
        if isinstance(errors, list):
            return [str(e) for e in errors]
        if isinstance(details, list):
            return [str(d.get("text") or d.get("message") or d) if isinstance(d, dict) else str(d)
                    for d in details]
        return []


def _error_of(status: int, reason: str | None, body: bytes, *, token_sent: bool) -> RemoteError:
    """The error an answer describes; a body not in the API's shape (a proxy's page) still gives
    its status and a little of its text. `token_sent`: the request carried a bearer token.
    """
    try:
        error = jsonutil.loads(body).get("error")
    except (ValueError, AttributeError):
        error = None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        return RemoteError(status, str(error.get("code") or "error"), error["message"],
                           error.get("details"), token_sent=token_sent)
    text = body.decode(errors="replace").strip().splitlines()
    return RemoteError(status, "error", (text[0][:200] if text else "") or reason or "no message",
                       token_sent=token_sent)


@dataclass(frozen=True)
class SseEvent:
    """One Server-Sent Events frame: `id` (the events stream sequence), `event` and `data`."""

    id: str | None
    event: str
    data: str

    def json(self) -> JsonValue:
        value: JsonValue = jsonutil.loads(self.data)
        return value


class SseParser:
    """Frames out of a byte stream cut anywhere, per the SSE format: `field: value` lines, a
    blank line ends a frame, `:` starts a comment. Lines are split here rather than by the
    response's readline, which refuses lines longer than its buffer (an event may be 256 KiB).
    """

    def __init__(self) -> None:
        self._buffer = b""
        self._last_id: str | None = None
        self._event = ""
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[SseEvent]:
        self._buffer += chunk
        *lines, self._buffer = self._buffer.split(b"\n")
        frames = []
        for raw in lines:
            line = raw.removesuffix(b"\r").decode(errors="replace")
            if not line:
                if self._data:
                    frames.append(SseEvent(self._last_id, self._event or "message",
                                           "\n".join(self._data)))
                self._event, self._data = "", []
                continue
            if line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "data":
                self._data.append(value)
            elif name == "event":
                self._event = value
            elif name == "id" and "\0" not in value:
                self._last_id = value
        return frames


class ApiClient:
    """Requests to one server with one token, on one aiohttp session (see `open_client`)."""

    def __init__(self, session: aiohttp.ClientSession, base_url: str, token: str | None) -> None:
        self.session = session
        self.base_url = base_url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}

    def _unreachable(self, exc: BaseException) -> InfrastructureError:
        return InfrastructureError(f"cannot reach the server at {self.base_url}: "
                                   f"{exc or type(exc).__name__}")

    async def request(self, method: str, path: str, *, json: object = None,
                      headers: dict[str, str] | None = None) -> JsonValue:
        """The JSON answer to a request; RemoteError for an error answer."""
        body = None if json is None else jsonutil.dumps(json)
        sent = {**self.headers, **(headers or {})}
        if body is not None:
            sent["Content-Type"] = "application/json"
        try:
            timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
            async with self.session.request(method, self.base_url + path, data=body,
                                            headers=sent, timeout=timeout) as resp:
                answer = await resp.read()
                status, reason = resp.status, resp.reason
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise self._unreachable(exc) from None
        if status >= 400:
            raise _error_of(status, reason, answer, token_sent="Authorization" in sent)
        value: JsonValue = jsonutil.loads(answer) if answer.strip() else None
        return value

    async def answer(self, model: type[M], method: str, path: str, *, json: object = None,
                     headers: dict[str, str] | None = None) -> M:
        """The answer to a request, read as the API's model of it (api/models.py)."""
        value = await self.request(method, path, json=json, headers=headers)
        return answer_as(model, value, f"{method} {path}")

    async def events(self, execution_id: str, *, wait_for_start: bool = False,
                     ) -> AsyncIterator[SseEvent]:
        """The execution's events from its first, live, until the server ends the stream after
        its terminal event (the last one, for an execution restarted after an earlier end).

        With `wait_for_start`, an execution the server does not know yet (its request is stored
        but no server has started it) is waited for rather than reported as not found.
        """
        path = f"{self.base_url}/api/executions/{quote(execution_id, safe='')}/events/stream"
        last_id: str | None = None
        failures = 0
        while True:
            headers = {**self.headers, "Accept": "text/event-stream"}
            if last_id is not None:
                headers["Last-Event-ID"] = last_id
            frames = 0
            try:
                timeout = aiohttp.ClientTimeout(total=None, sock_connect=STREAM_CONNECT_S,
                                                sock_read=STREAM_READ_S)
                async with self.session.get(path, headers=headers, timeout=timeout) as resp:
                    if resp.status == 404 and wait_for_start and last_id is None:
                        await resp.read()
                        failures = 0  # the server answers; it only has not started it yet
                        await asyncio.sleep(0.5)
                        continue
                    if resp.status >= 400:
                        raise _error_of(resp.status, resp.reason, await resp.read(),
                                        token_sent="Authorization" in headers)
                    parser = SseParser()
                    async for chunk in resp.content.iter_any():
                        for frame in parser.feed(chunk):
                            frames += 1
                            failures = 0
                            last_id = frame.id if frame.id is not None else last_id
                            yield frame
            except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, TimeoutError) as exc:
                # A dropped connection (a restarted server, a proxy's idle cut): resume after
                # the last frame seen. Only a server that stays away is an error.
                failures += 1
                if failures > RECONNECTS or (last_id is None and failures == 1 and
                                             isinstance(exc, aiohttp.ClientConnectorError)):
                    raise self._unreachable(exc) from None
                await asyncio.sleep(min(0.25 * 2 ** failures, 5.0))
                continue
            if frames == 0:
                # The server ended at once: the execution is over and every event of it was
                # sent (or, on a first connection, none is left; the caller asks how it ended).
                return
            # Ended cleanly before the terminal event: a proxy's cut; resume.


def answer_as(model: type[M], value: JsonValue, request: str) -> M:
    """`value` as `model`; an answer of another shape (a server of another version, a proxy)
    is an InfrastructureError naming the request and the first field that does not fit.
    """
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        problem = exc.errors()[0]
        where = ".".join(str(p) for p in problem["loc"]) or "the body"
        raise InfrastructureError(f"the server's answer to {request} is not what this client "
                                  f"reads: {where}: {problem['msg']}") from None


@contextlib.asynccontextmanager
async def open_client(base_url: str, token: str | None) -> AsyncIterator[ApiClient]:
    if not base_url.startswith(("http://", "https://")):
        base_url = "http://" + base_url
    async with aiohttp.ClientSession() as session:
        yield ApiClient(session, base_url, token)
