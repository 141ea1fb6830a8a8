"""Stored writes per second of one stream: single publishes against atomic and fast batches, on a
nats-server with the embedded configuration (`sync_interval: always`). Research for bench/README.md
("Batch publishes and the fsync"); the runtime publishes no batches.

    .venv/bin/python bench/batch_publish.py                  # rates, 1,000 messages a row
    STRACE=1 .venv/bin/python bench/batch_publish.py         # and fsyncs per row (strace -c)
    .venv/bin/python bench/batch_publish.py --semantics      # Nats-Msg-Id and revision checks

Single: `js.publish` with a Nats-Msg-Id, 1 or 50 in flight. Atomic: `Nats-Batch-Id`,
`Nats-Batch-Sequence`, `Nats-Batch-Commit: 1` on the last message (the only one asking for an
ack), 1 or 10 batches in flight. Fast: the reply subject `<prefix>.<flow>.fail.<seq>.<op>.$FI`
(op 0 start, 1 append, 2 commit; an ack every `flow` messages), 1 or 10 batches in flight.
STRACE=1 attaches `strace -f -c -e trace=fsync,fdatasync` to nats-server for each row (root).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import nats
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import RetentionPolicy, StorageType, StreamConfig

from noetl_stream.bus.nats_server import start_nats_server

PAYLOAD = b"x" * 300
SUBJECT = "b.x"


class Fsyncs:
    """`strace -c` on nats-server for the duration of a row, when STRACE=1."""

    def __init__(self, pid: int, tag: str) -> None:
        self.pid, self.out = pid, Path(tempfile.gettempdir()) / f"batch-publish-strace-{tag}.txt"
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Fsyncs:
        if os.environ.get("STRACE") == "1":
            self.proc = subprocess.Popen(["strace", "-f", "-c", "-e", "trace=fsync,fdatasync", "-p",
                                          str(self.pid), "-o", str(self.out)],
                                         stderr=subprocess.DEVNULL)
            time.sleep(0.5)  # attached to every thread before the row starts
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            time.sleep(0.2)
            self.proc.send_signal(signal.SIGINT)
            self.proc.wait()

    def count(self) -> int | None:
        if self.proc is None:
            return None
        rows = (line.split() for line in self.out.read_text().splitlines())
        return sum(int(r[3]) for r in rows if r and r[-1] in ("fsync", "fdatasync"))


async def atomic_batch(nc: Client, batch_id: str, ids: list[str]) -> dict[str, Any]:
    """One atomic batch of len(ids) messages; the commit's answer."""
    for seq, msg_id in enumerate(ids[:-1], 1):
        await nc.publish(SUBJECT, PAYLOAD, headers={
            "Nats-Batch-Id": batch_id, "Nats-Batch-Sequence": str(seq), "Nats-Msg-Id": msg_id})
    answer = await nc.request(SUBJECT, PAYLOAD, timeout=10, headers={
        "Nats-Batch-Id": batch_id, "Nats-Batch-Sequence": str(len(ids)),
        "Nats-Batch-Commit": "1", "Nats-Msg-Id": ids[-1]})
    reply: dict[str, Any] = json.loads(answer.data)
    return reply


async def fast_batch(nc: Client, ids: list[str]) -> list[dict[str, Any]]:
    """One fast batch of len(ids) messages; every answer up to the final ack."""
    prefix, size = f"_FB.{uuid.uuid4().hex}", len(ids)
    answers: asyncio.Queue[Msg] = asyncio.Queue()

    async def on_answer(msg: Msg) -> None:
        answers.put_nowait(msg)

    sub = await nc.subscribe(f"{prefix}.>", cb=on_answer)
    for seq, msg_id in enumerate(ids, 1):
        op = 0 if seq == 1 else (2 if seq == size else 1)
        await nc.publish(SUBJECT, PAYLOAD, reply=f"{prefix}.{size}.fail.{seq}.{op}.$FI",
                         headers={"Nats-Msg-Id": msg_id})
    seen: list[dict[str, Any]] = []
    try:
        while not seen or not ("stream" in seen[-1] or "error" in seen[-1]):
            msg = await asyncio.wait_for(answers.get(), 10)
            seen.append(json.loads(msg.data) if msg.data else {})
    finally:
        await sub.unsubscribe()
    return seen


async def _row(nc: Client, js: JetStreamContext, kind: str, size: int, in_flight: int,
               n: int, tag: str) -> int:
    gate = asyncio.Semaphore(in_flight)

    async def one(i: int) -> None:
        ids = [f"{tag}-{i}-{s}" for s in range(size)]
        async with gate:
            if kind == "single":
                await js.publish(SUBJECT, PAYLOAD, headers={"Nats-Msg-Id": ids[0]})
            elif kind == "atomic":
                reply = await atomic_batch(nc, f"{tag}-{i}", ids)
                assert "error" not in reply, reply
            else:
                answers = await fast_batch(nc, ids)
                assert "error" not in answers[-1], answers

    await asyncio.gather(*(one(i) for i in range(n // size)))
    return n // size * size


async def rates(n: int) -> None:
    with tempfile.TemporaryDirectory(prefix="batch-publish-") as folder:
        server = await start_nats_server(Path(folder), record=False)
        assert server.process is not None
        nc = await nats.connect(server.url)
        js = nc.jetstream()
        await js.add_stream(StreamConfig(name="B", subjects=["b.>"], storage=StorageType.FILE,
                                         allow_atomic=True, allow_batched=True))
        plan = [("single", 1, 1), ("single", 1, 50)]
        plan += [(kind, size, flight) for kind in ("atomic", "fast") for size in (2, 5, 20)
                 for flight in (1, 10)]
        try:
            for kind, size, flight in plan:
                tag = f"{kind}{size}x{flight}"
                with Fsyncs(server.process.pid, tag) as fsyncs:
                    start = time.perf_counter()
                    stored = await _row(nc, js, kind, size, flight, n, tag)
                    wall = time.perf_counter() - start
                count = fsyncs.count()
                per = "" if count is None else f"  fsyncs {count} ({count / stored:.2f} a message)"
                print(f"{kind:7} batch {size:<3} in flight {flight:<3} {stored} messages "
                      f"{wall:6.2f} s {stored / wall:7.0f} stored/s{per}", flush=True)
        finally:
            await nc.close()
            await server.stop()


async def semantics() -> None:
    """What nats-server answers to duplicate message ids and failed revision checks in batches."""
    with tempfile.TemporaryDirectory(prefix="batch-publish-") as folder:
        server = await start_nats_server(Path(folder), record=False)
        nc = await nats.connect(server.url)
        js = nc.jetstream()
        await js.add_stream(StreamConfig(name="B", subjects=["b.>"], storage=StorageType.FILE,
                                         retention=RetentionPolicy.WORK_QUEUE, allow_atomic=True,
                                         allow_batched=True))

        async def stored() -> int:
            return (await js.stream_info("B")).state.messages

        try:
            checks: list[tuple[str, Any]] = [
                ("atomic a1 a2 a3 (work queue)", lambda: atomic_batch(nc, "A1", ["a1", "a2", "a3"])),
                ("atomic a1 a2 a3 again", lambda: atomic_batch(nc, "A2", ["a1", "a2", "a3"])),
                ("atomic n1 a2 n2 (a2 stored before)", lambda: atomic_batch(nc, "A3", ["n1", "a2", "n2"])),
                ("atomic x1 x1 x2", lambda: atomic_batch(nc, "A4", ["x1", "x1", "x2"])),
                ("fast f1 f2 f3", lambda: fast_batch(nc, ["f1", "f2", "f3"])),
                ("fast f1 f4 f3 (f1, f3 stored before)", lambda: fast_batch(nc, ["f1", "f4", "f3"])),
                ("fast f1 f2 f3 again", lambda: fast_batch(nc, ["f1", "f2", "f3"])),
            ]
            for what, publish in checks:
                print(f"{what}: {await publish()}; stored in all: {await stored()}")
            for expected in ("0", "7"):  # a revision check, as a KV update makes, in a batch
                bid = f"E{expected}"
                await nc.publish("b.k1", b"v", headers={
                    "Nats-Batch-Id": bid, "Nats-Batch-Sequence": "1", "Nats-Msg-Id": f"{bid}a",
                    "Nats-Expected-Last-Subject-Sequence": expected})
                answer = await nc.request("b.k2", b"v", timeout=5, headers={
                    "Nats-Batch-Id": bid, "Nats-Batch-Sequence": "2", "Nats-Batch-Commit": "1",
                    "Nats-Msg-Id": f"{bid}b"})
                print(f"atomic, first message expects b.k1 at {expected}: "
                      f"{json.loads(answer.data)}; stored in all: {await stored()}")
        finally:
            await nc.close()
            await server.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=1000, help="messages a row")
    ap.add_argument("--semantics", action="store_true", help="duplicates and revision checks")
    args = ap.parse_args()
    asyncio.run(semantics() if args.semantics else rates(args.n))
    return 0


if __name__ == "__main__":
    sys.exit(main())
