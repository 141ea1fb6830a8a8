"""Pieces both benchmarks use: process readings and the bare JetStream round trip."""

from __future__ import annotations

import contextlib
import os
import time

from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    KeyValueConfig,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)

from noetl_stream.runtime.connection import Bus


def cpu_s(pid: int | None) -> float:
    """User + system CPU seconds of process `pid` (None: this process)."""
    if pid is None:
        return time.process_time()
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def rss_mb(pid: int | str = "self") -> float | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


# -- RAW: bare JetStream round trip ------------------------------------------------------------
async def raw_round_trips(bus: Bus, n: int, *, batch: int, kv: bool, tag: str) -> float:
    """Seconds for `n` sequential round trips: publish a command -> pull fetch (+ ack) -> publish
    an event -> pull fetch (+ ack), on scratch streams. `batch` is the fetch batch size (the
    runtime asks for up to 64 commands and 256 events); `kv` adds the router's revision-checked
    KV update of a ~1 KB state per round trip. Acks are double acks, as in the runtime."""
    js = bus.js
    cmd_stream, ev_stream = f"BENCH_{tag}_CMD", f"BENCH_{tag}_EV"
    for name, subj, retention in ((cmd_stream, f"bench.{tag}.cmd.>", RetentionPolicy.WORK_QUEUE),
                                  (ev_stream, f"bench.{tag}.ev.>", RetentionPolicy.LIMITS)):
        with contextlib.suppress(Exception):
            await js.delete_stream(name)
        await js.add_stream(StreamConfig(name=name, subjects=[subj], retention=retention,
                                         storage=StorageType.FILE, duplicate_window=1200))
        await js.add_consumer(name, ConsumerConfig(durable_name="c", ack_policy=AckPolicy.EXPLICIT,
                                                   deliver_policy=DeliverPolicy.ALL, ack_wait=30,
                                                   max_ack_pending=20000))
    cmd_sub = await js.pull_subscribe_bind("c", stream=cmd_stream)
    ev_sub = await js.pull_subscribe_bind("c", stream=ev_stream)
    bucket = None
    revision = 0
    state = b'{"pad":"' + b"x" * 1000 + b'"}'
    if kv:
        bucket_name = f"bench_{tag.lower()}"
        with contextlib.suppress(Exception):
            await js.delete_key_value(bucket_name)
        bucket = await js.create_key_value(KeyValueConfig(bucket=bucket_name, history=1,
                                                          storage=StorageType.FILE))
        revision = await bucket.put("state", state)
    body = b'{"execution_id":"x","step":"s","context":{}}'

    async def one(i: int) -> None:
        nonlocal revision
        await js.publish(f"bench.{tag}.cmd.default.noop", body, headers={"Nats-Msg-Id": f"c{i}"})
        (cmd,) = await cmd_sub.fetch(batch, timeout=5)
        await js.publish(f"bench.{tag}.ev.x.step.done", body, headers={"Nats-Msg-Id": f"e{i}"})
        await cmd.ack_sync()
        (ev,) = await ev_sub.fetch(batch, timeout=5)
        if bucket is not None:
            revision = await bucket.update("state", state, last=revision)
        await ev.ack_sync()

    for i in range(min(50, n)):  # warm up
        await one(-1 - i)
    t0 = time.perf_counter()
    for i in range(n):
        await one(i)
    elapsed = time.perf_counter() - t0
    for name in (cmd_stream, ev_stream):
        with contextlib.suppress(Exception):
            await js.delete_stream(name)
    if bucket is not None:
        with contextlib.suppress(Exception):
            await js.delete_key_value(f"bench_{tag.lower()}")
    return elapsed
