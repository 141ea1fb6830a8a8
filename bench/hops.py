"""How long nats-server takes to store each write, seen from outside: a tap on every subject.

    .venv/bin/python bench/hops.py nats://127.0.0.1:4222   # until stdin closes; JSON on stdout

A core subscription on `>` sees each message as nats-server routes it, including a stored
publish (its reply subject is the publisher's inbox) and, later, the acknowledgement nats-server
sends to that inbox once the message is stored (with `sync_interval: always`, after its fsync).
The time between the two is the store's own latency, by stream, free of the publisher's and the
consumer's Python. bench/run.py runs the tap in a process of its own beside a sequential chain and
beside W3, so the headline table can say how much of a step's time is nats-server storing and how
that grows under load.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import select
import socket
import statistics
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

JS_ACK = "$JS.ACK."


def stream_of(subject: str) -> str | None:
    """The stream a published subject is stored in, by the project's topology (subjects/
    topology.yaml, any prefix); None for a subject that is no stored write of ours.
    """
    parts = subject.split(".", 3)
    if parts[0] == "$KV" and len(parts) > 2:
        return f"KV_{parts[1]}"
    if parts[0].startswith("$") or parts[0].startswith("_INBOX") or len(parts) < 3:
        return None
    return {"events": "NOETL_EVENTS", "commands": "NOETL_COMMANDS",
            "requests": "NOETL_REQUESTS"}.get(parts[1])


@dataclass
class StoreTimes:
    """Stored publishes seen, and each one's store latency (ms) by stream."""

    waiting: dict[str, tuple[float, str]] = field(default_factory=dict)  # reply -> (t, stream)
    stored: dict[str, list[float]] = field(default_factory=dict)

    def seen(self, at: float, subject: str, reply: str) -> None:
        if reply and not reply.startswith(JS_ACK):
            stream = stream_of(subject)
            if stream is not None:
                self.waiting[reply] = (at, stream)
            return
        started = self.waiting.pop(subject, None)
        if started is not None:
            self.stored.setdefault(started[1], []).append((at - started[0]) * 1000)

    def report(self) -> dict[str, dict[str, float]]:
        """Per stream, and for all of them together: count, p50, p90 and sum in ms."""
        every = [ms for times in self.stored.values() for ms in times]
        return {name: _figures(times)
                for name, times in sorted({**self.stored, "all": every}.items()) if times}


def _figures(times: list[float]) -> dict[str, float]:
    ordered = sorted(times)
    return {"count": len(ordered), "p50_ms": round(statistics.median(ordered), 3),
            "p90_ms": round(ordered[int(len(ordered) * 0.9)], 3), "sum_ms": round(sum(ordered), 3)}


def tap(url: str, until: socket.socket | int) -> StoreTimes:
    """Read every message of the account from a plain socket until `until` is readable (the
    parent closed our stdin), stamping each read as it comes off the socket: a client library
    would stamp a message only when its callback runs, late by however far it fell behind.
    """
    times = StoreTimes()
    parsed = urlsplit(url)
    sock = socket.create_connection((parsed.hostname or "127.0.0.1", parsed.port or 4222))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    connect = {"verbose": False, "pedantic": False, "headers": True, "name": "noetl-bench-tap",
               **({"user": parsed.username, "pass": parsed.password} if parsed.username else {})}
    sock.sendall(f"CONNECT {json.dumps(connect)}\r\nSUB > 1\r\nPING\r\n".encode())
    buffer, announced = b"", False
    while True:
        readable, _, _ = select.select([sock, until], [], [])
        if until in readable:
            break
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise ConnectionError("nats-server closed the tap's connection")
        at = time.perf_counter()
        buffer += chunk
        buffer, pongs, pings = _messages(buffer, partial(times.seen, at))
        if pings:
            sock.sendall(b"PONG\r\n" * pings)
        if pongs and not announced:
            print("tapping", flush=True)  # our SUB is in place: the parent may start
            announced = True
    sock.close()
    return times


def _messages(buffer: bytes,
              on_message: Callable[[str, str], None]) -> tuple[bytes, int, int]:
    """Hand each complete MSG / HMSG in `buffer` to `on_message(subject, reply)`. Returns what is
    left of `buffer` and how many PONGs and PINGs it held.
    """
    pongs = pings = 0
    while (end := buffer.find(b"\r\n")) >= 0:
        head = buffer[:end].split()
        if head and head[0] in (b"MSG", b"HMSG"):
            size = int(head[-1])
            if len(buffer) < end + 2 + size + 2:
                break  # the payload is still on its way
            reply = head[3] if len(head) == (5 if head[0] == b"MSG" else 6) else b""
            on_message(head[1].decode(), reply.decode())
            buffer = buffer[end + 2 + size + 2:]
            continue
        pongs += head == [b"PONG"]
        pings += head == [b"PING"]
        buffer = buffer[end + 2:]
    return buffer, pongs, pings


@contextlib.asynccontextmanager
async def tapped(url: str) -> AsyncIterator[dict[str, Any]]:
    """Run the tap in a process of its own (its Python must not share the loop it measures)
    while the body runs; the dict it yields holds the report once the body is done.
    """
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(Path(__file__).resolve()), url,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    report: dict[str, Any] = {}
    try:
        ready = await asyncio.wait_for(proc.stdout.readline(), timeout=30)
        if ready.strip() != b"tapping":
            raise RuntimeError(f"the tap did not start: {ready!r}")
        yield report
        proc.stdin.close()
        report.update(json.loads(await asyncio.wait_for(proc.stdout.readline(), timeout=60)))
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        await proc.wait()


def main(url: str) -> None:
    times = tap(url, sys.stdin.fileno())
    print(json.dumps(times.report()), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
