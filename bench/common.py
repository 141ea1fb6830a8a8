"""Pieces both benchmarks use: process readings and the bare JetStream round trip."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections.abc import Awaitable, Callable

from nats.aio.msg import Msg
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    KeyValueConfig,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from nats.js.kv import KeyValue

from noetl_stream.bus.connection import Bus
from noetl_stream.bus.pull import PullConsumer


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


def rss_mb(pid: int | str = "self", field: str = "VmRSS") -> float | None:
    """A process's resident memory in MB (`VmHWM`: its peak since start or `reset_peak_rss`)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(f"{field}:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def reset_peak_rss(pid: int | str = "self") -> bool:
    """Start a process's VmHWM again from its current RSS (Linux `clear_refs` 5); False when
    this kernel or process does not allow it."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return rss_mb(pid, "VmHWM") is not None


# -- scratch streams and bucket of the RAW workloads -------------------------------------------
_STATE = b'{"pad":"' + b"x" * 1000 + b'"}'  # the ~1 KB state a RAW commit writes


def _stream_names(tag: str) -> tuple[str, str]:
    return f"BENCH_{tag}_CMD", f"BENCH_{tag}_EV"


async def _scratch_streams(bus: Bus, tag: str) -> tuple[str, str]:
    """A command work queue and an event stream for `tag`, each with a durable `c`, made anew."""
    cmd_stream, ev_stream = _stream_names(tag)
    for name, subj, retention in ((cmd_stream, f"bench.{tag}.cmd.>", RetentionPolicy.WORK_QUEUE),
                                  (ev_stream, f"bench.{tag}.ev.>", RetentionPolicy.LIMITS)):
        with contextlib.suppress(Exception):
            await bus.js.delete_stream(name)
        await bus.js.add_stream(StreamConfig(name=name, subjects=[subj], retention=retention,
                                             storage=StorageType.FILE, duplicate_window=1200))
        await bus.js.add_consumer(name, ConsumerConfig(
            durable_name="c", ack_policy=AckPolicy.EXPLICIT, deliver_policy=DeliverPolicy.ALL,
            ack_wait=30, max_ack_pending=20000))
    return cmd_stream, ev_stream


async def _scratch_bucket(bus: Bus, tag: str) -> KeyValue:
    name = f"bench_{tag.lower()}"
    with contextlib.suppress(Exception):
        await bus.js.delete_key_value(name)
    return await bus.js.create_key_value(KeyValueConfig(bucket=name, history=1,
                                                        storage=StorageType.FILE))


async def _drop_scratch(bus: Bus, tag: str) -> None:
    """Remove what _scratch_streams and _scratch_bucket made for `tag` (what exists of it)."""
    for name in _stream_names(tag):
        with contextlib.suppress(Exception):
            await bus.js.delete_stream(name)
    with contextlib.suppress(Exception):
        await bus.js.delete_key_value(f"bench_{tag.lower()}")


# -- RAW: bare JetStream round trip ------------------------------------------------------------
async def raw_round_trips(bus: Bus, n: int, *, batch: int, kv: bool, tag: str) -> float:
    """Seconds for `n` sequential round trips: publish a command -> pull fetch (+ ack) -> publish
    an event -> pull fetch (+ ack), on scratch streams. `batch` is the fetch batch size (the
    runtime asks for up to 64 commands and 256 events); `kv` adds the router's revision-checked
    KV update of a ~1 KB state per round trip. Both messages are double-acked, which is how the
    baseline is defined (the runtime's acks are plain, so it does less than this)."""
    js = bus.js
    cmd_stream, ev_stream = await _scratch_streams(bus, tag)
    cmd_sub = await js.pull_subscribe_bind("c", stream=cmd_stream)
    ev_sub = await js.pull_subscribe_bind("c", stream=ev_stream)
    bucket = await _scratch_bucket(bus, tag) if kv else None
    revision = 0
    if bucket is not None:
        revision = await bucket.put("state", _STATE)
    body = b'{"execution_id":"x","step":"s","context":{}}'

    async def one(i: int) -> None:
        nonlocal revision
        await js.publish(f"bench.{tag}.cmd.default.noop", body, headers={"Nats-Msg-Id": f"c{i}"})
        (cmd,) = await cmd_sub.fetch(batch, timeout=5)
        await js.publish(f"bench.{tag}.ev.x.step.done", body, headers={"Nats-Msg-Id": f"e{i}"})
        await cmd.ack_sync()
        (ev,) = await ev_sub.fetch(batch, timeout=5)
        if bucket is not None:
            revision = await bucket.update("state", _STATE, last=revision)
        await ev.ack_sync()

    for i in range(min(50, n)):  # warm up
        await one(-1 - i)
    t0 = time.perf_counter()
    for i in range(n):
        await one(i)
    elapsed = time.perf_counter() - t0
    await _drop_scratch(bus, tag)
    return elapsed


# -- RAW-W3: the least a step must send, many executions at once ----------------------------
async def raw_concurrent(bus: Bus, executions: int, steps: int, *, tag: str) -> float:
    """Seconds for `executions` chains of `steps` steps run at once, each step sending only
    what the delivery rules require of it: the command published and stored, taken by a
    "worker" that publishes the event (stored) and acks the command, the event taken by a
    "router" that commits a ~1 KB state with a revision-checked KV update, publishes the next
    command and acks the event. Both sides keep pull requests waiting (bus/pull.py) and
    handle each message in a task of its own, as the runtime does. This is the throughput
    floor of the delivery rules in one Python process with nats-py, with no routing, no
    tools, no watchers and no progress events.
    """
    js = bus.js
    cmd_stream, ev_stream = await _scratch_streams(bus, tag)
    bucket = await _scratch_bucket(bus, tag)
    revisions = {e: await bucket.put(f"e{e}", _STATE) for e in range(executions)}
    commands = PullConsumer(bus.nc, cmd_stream, "c", credit=64)
    events = PullConsumer(bus.nc, ev_stream, "c", credit=256)
    await commands.start()
    await events.start()
    finished = asyncio.Event()
    left = executions
    running: set[asyncio.Task[None]] = set()

    def body(execution: int, step: int) -> bytes:
        return b'{"execution":%d,"step":%d}' % (execution, step)

    async def command(msg: Msg) -> None:
        execution, step = _numbers(msg.data)
        await js.publish(f"bench.{tag}.ev.{execution}.done", body(execution, step),
                         headers={"Nats-Msg-Id": f"e{execution}.{step}"})
        await msg.ack()
        await commands.grant(1)

    async def event(msg: Msg) -> None:
        nonlocal left
        execution, step = _numbers(msg.data)
        revisions[execution] = await bucket.update(f"e{execution}", _STATE,
                                                   last=revisions[execution])
        if step + 1 < steps:
            await js.publish(f"bench.{tag}.cmd.{execution}", body(execution, step + 1),
                             headers={"Nats-Msg-Id": f"c{execution}.{step + 1}"})
        else:
            left -= 1
            if left == 0:
                finished.set()
        await msg.ack()
        await events.grant(1)

    async def take(consumer: PullConsumer, handle: Callable[[Msg], Awaitable[None]]) -> None:
        while True:
            for msg in await consumer.next_batch(256):
                task = asyncio.create_task(handle(msg))
                running.add(task)
                task.add_done_callback(running.discard)

    loops = [asyncio.create_task(take(commands, command)), asyncio.create_task(take(events, event))]
    t0 = time.perf_counter()
    for e in range(executions):
        await js.publish(f"bench.{tag}.cmd.{e}", body(e, 0), headers={"Nats-Msg-Id": f"c{e}.0"})
    await asyncio.wait_for(finished.wait(), 120)
    elapsed = time.perf_counter() - t0
    for task in loops:
        task.cancel()
    await asyncio.gather(*loops, return_exceptions=True)
    await commands.stop()
    await events.stop()
    await _drop_scratch(bus, tag)
    return elapsed


def _numbers(data: bytes) -> tuple[int, int]:
    value = json.loads(data)
    return int(value["execution"]), int(value["step"])
