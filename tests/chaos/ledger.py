"""The side-effect ledger: a real local HTTP service that the workload's http steps change.

POST /effect   {call, amount} with an `Idempotency-Key` header. The first request with a key
               applies the effect (counted per logical `call`) and stores the reply; a repeat of
               the key gets the stored reply again without applying anything, which is what an
               idempotent API does. Before applying, some attempts get a 503, chosen by a hash of
               the call and the attempt number in the key, so a fault-free run sees the same 503s
               as every other run and the results do not depend on timing.
POST /beat     {execution_id, pid}: a long task says which process runs it.

Faults are aimed through `hook`: it is awaited while a request is held, before the effect is
applied ("during") and right after it is recorded but before the reply leaves ("after"), with the
pid of the worker that sent the request.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from aiohttp import web

Phase = Literal["during", "after"]
Hook = Callable[[Phase, "int | None", str], Awaitable[None]]


def failures_before_success(call: str) -> int:
    """How many attempts of a logical call get a 503 first (0, 1 or 2)."""
    return hashlib.sha256(call.encode()).digest()[0] % 3


def attempt_of(key: str) -> int:
    """The attempt number the pipeline puts last in an idempotency key (`...:<task>:<attempt>`)."""
    for part in reversed(key.split(":")):
        if part.isdigit():
            return int(part)
    return 1


@dataclass
class Ledger:
    url: str = ""
    port: int = 0
    requests: Counter[str] = field(default_factory=Counter)  # raw requests per idempotency key
    replies: dict[str, dict[str, Any]] = field(default_factory=dict)  # applied key -> stored reply
    applied: Counter[str] = field(default_factory=Counter)  # applied effects per logical call
    missing_key: int = 0
    unavailable: int = 0
    beats: Counter[str] = field(default_factory=Counter)  # execution id -> long task starts
    beat_pids: dict[str, int] = field(default_factory=dict)
    hook: Hook | None = None
    worker_pids: Callable[[], list[int]] = list

    def duplicate_effects(self) -> int:
        """Effects applied more than once for one logical call: must be 0."""
        return sum(n - 1 for n in self.applied.values() if n > 1)

    def raw_repeats(self) -> int:
        """Requests that repeated a key (replayed, not applied): allowed, at-least-once."""
        return sum(n - 1 for n in self.requests.values() if n > 1)

    def reset(self) -> None:
        self.requests.clear()
        self.replies.clear()
        self.applied.clear()
        self.beats.clear()
        self.beat_pids.clear()
        self.missing_key = self.unavailable = 0
        self.hook = None


def app(ledger: Ledger) -> web.Application:
    async def effect(request: web.Request) -> web.Response:
        body = await request.json()
        call = str(body.get("call"))
        key = request.headers.get("Idempotency-Key")
        if not key:
            ledger.missing_key += 1
            return web.json_response({"error": "Idempotency-Key required"}, status=400)
        ledger.requests[key] += 1
        stored = ledger.replies.get(key)
        if stored is not None:
            return web.json_response(stored)
        if attempt_of(key) <= failures_before_success(call):
            ledger.unavailable += 1
            return web.json_response({"error": "unavailable"}, status=503)
        pid = _sender_pid(request, ledger)
        if ledger.hook is not None:
            await ledger.hook("during", pid, call)
        if key in ledger.replies:  # a repeat arrived while this one was held
            return web.json_response(ledger.replies[key])
        reply = {"call": call, "amount": body.get("amount"), "applied": True}
        ledger.replies[key] = reply
        ledger.applied[call] += 1
        if ledger.hook is not None:
            await ledger.hook("after", pid, call)
        return web.json_response(reply)

    async def beat(request: web.Request) -> web.Response:
        body = await request.json()
        eid = str(body.get("execution_id"))
        ledger.beats[eid] += 1
        ledger.beat_pids[eid] = int(body.get("pid") or 0)
        return web.json_response({"ok": True})

    application = web.Application()
    application.router.add_post("/effect", effect)
    application.router.add_post("/beat", beat)
    return application


async def start_ledger(ledger: Ledger) -> web.AppRunner:
    runner = web.AppRunner(app(ledger), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    server = site._server
    assert server is not None
    ledger.port = int(server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
    ledger.url = f"http://127.0.0.1:{ledger.port}"
    return runner


def _sender_pid(request: web.Request, ledger: Ledger) -> int | None:
    peer = request.transport.get_extra_info("peername") if request.transport else None
    if not peer:
        return None
    return pid_of_connection(int(peer[1]), ledger.port, ledger.worker_pids())


def pid_of_connection(client_port: int, server_port: int, candidates: list[int]) -> int | None:
    """Which of `candidates` holds the loopback TCP connection client_port -> server_port.

    Read from /proc (Linux): the socket's inode from /proc/net/tcp, then the process whose file
    descriptors include it. The harness uses it to kill exactly the worker mid-request.
    """
    inode = None
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            local, remote = cols[1], cols[2]
            if int(local.rsplit(":", 1)[1], 16) == client_port and \
                    int(remote.rsplit(":", 1)[1], 16) == server_port:
                inode = cols[9]
                break
        if inode:
            break
    if not inode:
        return None
    target = f"socket:[{inode}]"
    for pid in candidates:
        fd_dir = Path(f"/proc/{pid}/fd")
        try:
            for fd in fd_dir.iterdir():
                try:
                    if str(fd.readlink()) == target:
                        return pid
                except OSError:
                    continue
        except OSError:
            continue
    return None
