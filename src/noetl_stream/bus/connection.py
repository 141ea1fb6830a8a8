"""Connecting to NATS and JetStream with the options every process of ours uses."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from urllib.parse import unquote, urlsplit

import nats
from nats.aio.client import Client
from nats.errors import AuthorizationError, NoServersError
from nats.js import JetStreamContext
from nats.js.api import DEFAULT_PREFIX

from noetl_stream import config
from noetl_stream.bus.stored_publish import JETSTREAM_TIMEOUT_S, StoredPublisher
from noetl_stream.errors import InfrastructureError
from noetl_stream.subjects import Topology, load_topology

INITIAL_CONNECT_ATTEMPTS = 3
ENV_INBOX_PREFIX = "NOETL_STREAM_INBOX_PREFIX"
INBOX_ROOT = "_INBOX"
_NOT_IN_TOKEN = re.compile(r"[.*>\s]")
# The JetStream API prefix of every connection here (no domains): requests nats-py's JetStream
# context does not make (a priority group's pull, an unpin) are sent under it.
API_PREFIX = DEFAULT_PREFIX

log = logging.getLogger("noetl_stream.connection")


async def _log_error(exc: Exception, level: int = logging.WARNING) -> None:
    log.log(level, "nats: %s", exc or type(exc).__name__)


@dataclass
class Bus:
    """A NATS connection with its JetStream context and the topology it speaks."""

    nc: Client
    js: JetStreamContext
    topology: Topology
    # Called after every reconnect (pull consumers ask again for what they were waiting for).
    reconnect_listeners: list[Callable[[], None]] = field(default_factory=list)
    url: str | None = None  # what `connect` was given: another connection can be opened alike
    # Publishes that wait for the store's ack, with less work each than `js.publish`.
    stored: StoredPublisher = field(init=False)

    def __post_init__(self) -> None:
        self.stored = StoredPublisher(self.nc)

    async def close(self) -> None:
        if not self.nc.is_closed:
            await self.nc.drain()


def server_urls(url: str) -> list[str]:
    """`nats://a:4222,nats://b:4222` -> both URLs: every node of a cluster, tried in turn."""
    return [u.strip() for u in url.split(",") if u.strip()]


NATS_SCHEMES = ("nats", "tls", "ws", "wss")


def check_nats_url(url: str) -> str:
    """`url` itself when every comma-separated part is a NATS URL (`nats://host:port`, or
    `host:port` as nats-py reads it); a ValueError saying what is wrong otherwise, before any
    connection is tried.
    """
    servers = server_urls(url)
    if not servers:
        raise ValueError("--nats-url is empty")
    for server in servers:
        parts = urlsplit(server if "://" in server else f"nats://{server}")
        try:
            port = parts.port
        except ValueError:
            raise ValueError(f"NATS URL {redact_url(server)!r}: the port is not a number") from None
        if parts.scheme not in NATS_SCHEMES:
            raise ValueError(f"NATS URL {redact_url(server)!r}: scheme must be one of "
                             f"{', '.join(s + '://' for s in NATS_SCHEMES)}")
        if not parts.hostname:
            raise ValueError(f"NATS URL {redact_url(server)!r} names no host")
        if port is not None and not 0 < port < 65536:
            raise ValueError(f"NATS URL {redact_url(server)!r}: port {port} is out of range")
    return url


def _auth_options(servers: list[str]) -> dict[str, str]:
    # Credentials in a URL apply to every node, including those the cluster announces later
    # (nats-py sends a URL's user info only to that URL's server); else the environment's.
    for server in servers:
        parts = urlsplit(server)
        if parts.username is not None:
            if parts.password is None:
                return {"token": unquote(parts.username)}
            return {"user": unquote(parts.username), "password": unquote(parts.password)}
    return config.nats_auth_from_env()


def inbox_prefix(auth: Mapping[str, str]) -> str:
    """Where replies to this process go: `_INBOX.<user>` for a user (deploy/nats/accounts lets
    each user subscribe to its own prefix only, so no user reads replies meant for another),
    NOETL_STREAM_INBOX_PREFIX when set, else `_INBOX` (token or creds-file users).
    """
    if chosen := os.environ.get(ENV_INBOX_PREFIX, "").strip():
        return chosen
    user = auth.get("user")
    if not user:
        return INBOX_ROOT
    # A subject token holds no dot, wildcard or space; other characters are kept as they are.
    return f"{INBOX_ROOT}.{_NOT_IN_TOKEN.sub('_', str(user))}"


def redact_url(url: str) -> str:
    """The URL(s) without passwords or tokens, for messages and logs."""
    shown = []
    for server in server_urls(url):
        parts = urlsplit(server)
        if parts.username is not None:
            # Everything after the last "@" is host and port, even when the port is not a number.
            parts = parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2])
        shown.append(parts.geturl())
    return ",".join(shown)


async def connect(url: str, *, prefix: str = "noetl", name: str = "noetl-stream") -> Bus:
    """Connect to one node or a comma-separated list of cluster nodes; survives node loss by
    reconnecting to another node of the list (or one the cluster announces).
    """
    try:
        servers = server_urls(check_nats_url(url))
    except ValueError as exc:
        raise InfrastructureError(str(exc)) from None
    refused: list[Exception] = []
    connected = False

    async def on_error(exc: Exception) -> None:
        # nats-py reports refused credentials here and then only "no servers available".
        if "authorization violation" in str(exc).lower():
            refused.append(exc)
        # Before the first connection, the error that ends `connect` says what went wrong in
        # one line: each refused attempt is shown with -v only.
        await _log_error(exc, logging.WARNING if connected else logging.INFO)

    listeners: list[Callable[[], None]] = []

    async def on_reconnected() -> None:
        log.info("nats: reconnected")
        for listener in list(listeners):
            listener()

    auth = _auth_options(servers)
    try:
        # A few attempts for the first connection (with -1, nats-py would retry it forever, so a
        # wrong URL would hang instead of failing); once connected, reconnect without limit.
        nc = await nats.connect(servers, name=name, connect_timeout=5,
                                max_reconnect_attempts=INITIAL_CONNECT_ATTEMPTS,
                                reconnect_time_wait=0.5, allow_reconnect=True,
                                max_outstanding_pings=4, error_cb=on_error,
                                reconnected_cb=on_reconnected,
                                inbox_prefix=inbox_prefix(auth), **auth)
    except (AuthorizationError, NoServersError, OSError, TimeoutError) as exc:
        if refused or isinstance(exc, AuthorizationError):
            raise InfrastructureError(
                f"NATS at {redact_url(url)} refused our credentials: check the URL's "
                f"user:password or {config.ENV_NATS_USER}/{config.ENV_NATS_PASSWORD}, "
                f"{config.ENV_NATS_CREDS}, {config.ENV_NATS_TOKEN}") from None
        raise InfrastructureError(f"cannot reach NATS at {redact_url(url)}: "
                                  f"{exc or type(exc).__name__}") from None
    connected = True
    nc.options["max_reconnect_attempts"] = -1
    # The first load of a prefix reads and parses the topology file: in a thread, off the loop.
    topology = await asyncio.to_thread(load_topology, prefix)
    return Bus(nc, nc.jetstream(prefix=API_PREFIX, timeout=JETSTREAM_TIMEOUT_S), topology, listeners, url)


@contextlib.asynccontextmanager
async def own_connection(bus: Bus, name: str) -> AsyncIterator[Bus]:
    """A connection of its own to the NATS `bus` speaks to, for a part of a process whose
    actions must not cut the rest off (nats-server closes a connection that breaks its
    protocol: the HTTP API's actions cannot stop the router's consumers). `bus` itself when it
    was not made by `connect` (it is then not known how to connect again).
    """
    if bus.url is None:
        yield bus
        return
    own = await connect(bus.url, prefix=bus.topology.prefix, name=name)
    try:
        yield own
    finally:
        await own.close()
