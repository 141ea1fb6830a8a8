"""Wiring the processes: connect (or start the embedded nats-server), provision, run services."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Protocol

from noetl_stream import config
from noetl_stream.bus.connection import Bus, connect
from noetl_stream.bus.dead_letters import DeadLetters
from noetl_stream.bus.event_feed import event_follower
from noetl_stream.bus.nats_server import NatsServer, start_nats_server
from noetl_stream.bus.provision import provision_patiently
from noetl_stream.bus.watcher import ExecutionWatch
from noetl_stream.collector import tune_collector
from noetl_stream.jsonutil import JsonObject
from noetl_stream.server.admission import AdmissionService
from noetl_stream.server.execution_ids import new_execution_id
from noetl_stream.server.request_rpc import RequestResponder
from noetl_stream.server.retention import RetentionSweeper
from noetl_stream.server.server import Server
from noetl_stream.server.stalls import StallCheck
from noetl_stream.server.submission import submit
from noetl_stream.server.triggers import TriggerService
from noetl_stream.state.auth_cache import CachedCredentialResolver
from noetl_stream.state.crypto import SecretBox
from noetl_stream.state.results import ResultStore
from noetl_stream.tools.base import ToolServices
from noetl_stream.tools.registry import ToolRegistry
from noetl_stream.tools.sandbox import protect_worker_process
from noetl_stream.worker.credential_guard import CredentialGuard, ScopedCredentialResolver
from noetl_stream.worker.keychain import KeychainResolver
from noetl_stream.worker.worker import Worker


class _Service(Protocol):
    """A part of the stack: started in order, stopped in the reverse one."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


@dataclass
class Stack:
    bus: Bus
    nats: NatsServer | None  # set when we started (or reused) the embedded server


@contextlib.asynccontextmanager
async def open_stack(nats_url: str | None, *, prefix: str = "noetl",
                     pools: tuple[str, ...] = ("default",), name: str = "noetl-stream",
                     on_embedded: Callable[[NatsServer], None] | None = None,
                     ) -> AsyncIterator[Stack]:
    """Connect to `nats_url`, or start the embedded nats-server when it is None; provision."""
    nats: NatsServer | None = None
    if nats_url is None:
        nats = await start_nats_server(config.home_dir() / "nats")
        nats_url = nats.url
        if on_embedded is not None:
            on_embedded(nats)
    try:
        bus = await connect(nats_url, prefix=prefix, name=name)
        try:
            await provision_patiently(bus, pools)
            yield Stack(bus, nats)
        finally:
            await bus.close()
    finally:
        if nats is not None:
            await nats.stop()


@contextlib.asynccontextmanager
async def client_bus(nats_url: str | None, *, prefix: str, name: str) -> AsyncIterator[Bus]:
    """A bus for one short command: on the embedded nats-server (started and provisioned) when
    `nats_url` is None, else a plain connection, since the services on that NATS provisioned it.
    """
    if nats_url is None:
        async with open_stack(None, prefix=prefix, name=name) as stack:
            yield stack.bus
        return
    bus = await connect(nats_url, prefix=prefix, name=name)
    try:
        yield bus
    finally:
        await bus.close()


@contextlib.asynccontextmanager
async def run_services(bus: Bus, *, server: bool = True, worker: bool = True, pool: str = "default",
                       concurrency: int = 64, python_children: int = 8,
                       python_idle_s: float | None = None,
                       local: bool = False) -> AsyncIterator[None]:
    """Run a server and/or a worker on `bus` for the duration of the block (`local`: the
    embedded stack of `noetl-stream run`, the user's own).
    """
    tune_collector()  # fewer, cheaper garbage collections per step (collector.py)
    srv = Server(bus) if server else None
    responder = RequestResponder(bus) if server else None
    # Finished states carry nats-server's times (the server's clock): ages are measured on it.
    sweeper = RetentionSweeper(bus, clock=srv.clock) if srv is not None else None
    stalls = StallCheck(bus, clock=srv.clock) if srv is not None else None
    dead_letters = DeadLetters(bus, clock=srv.clock) if srv is not None else None
    admissions = AdmissionService(bus, clock=srv.clock) if srv is not None else None
    # A local `run` starts its one execution, not the fires and messages that waited for a server.
    triggers = TriggerService(bus) if srv is not None and not local else None
    home = config.home_dir()
    box = SecretBox.from_env(home)
    resolver = CachedCredentialResolver(bus.js, box)
    guard = CredentialGuard(bus, box)  # credential scopes, checked and recorded on every use
    tool_services = ToolServices(credentials=ScopedCredentialResolver(resolver, guard),
                                 nats=bus.nc, home=home, prefix=bus.topology.prefix, pool=pool,
                                 results=ResultStore(bus.js),
                                 follow_events=event_follower(bus.nc))
    keychain = KeychainResolver(bus.js, box, resolver, guard=guard)
    if worker:
        # Python children of the worker's own user may not read its memory or environment.
        protect_worker_process()
    # A local run starts python beside its first steps, which need not be python ones.
    tools = (await ToolRegistry.create(services=tool_services, python_children=python_children,
                                       quiet_python_fallback=local, python_idle_s=python_idle_s,
                                       python_in_background=local)
             if worker else None)
    wrk = (Worker(bus, tools, pool=pool, concurrency=concurrency, keychain=keychain)
           if tools is not None else None)
    # Started in this order and stopped in the reverse one: the worker stops taking commands
    # before the server that routes their outcomes goes away.
    parts: list[_Service] = [p for p in (srv, dead_letters, admissions, responder, sweeper,
                                         stalls, triggers, wrk) if p is not None]
    started: list[_Service] = []
    try:
        for part in parts:
            await part.start()
            started.append(part)
        yield
    finally:
        for part in reversed(started):
            await part.stop()
        if tools is not None:
            await tools.close()
        await keychain.close()


async def submit_and_watch(bus: Bus, *, playbook_text: str, playbook_file: str,
                           payload: JsonObject, on_event: Callable[[JsonObject], None],
                           execution_id: str | None = None,
                           on_started: Callable[[str], None] | None = None,
                           timeout_s: float | None = None,
                           labels: dict[str, str] | None = None) -> JsonObject:
    """Publish an execution request and follow its events to the end; return the final event."""
    execution_id = execution_id or new_execution_id()
    watch = ExecutionWatch(bus, execution_id, on_event)
    await watch.start()
    try:
        await submit(bus, playbook_text=playbook_text, playbook_file=playbook_file,
                     payload=payload, execution_id=execution_id, labels=labels)
        if on_started is not None:
            on_started(execution_id)
        return await watch.wait(timeout_s)
    finally:
        await watch.stop()


__all__ = ["Stack", "client_bus", "open_stack", "run_services", "submit", "submit_and_watch"]
