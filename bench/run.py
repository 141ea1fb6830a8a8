"""Benchmarks of noetl-stream on the embedded stack (nats-server + server + worker in-process).

    .venv/bin/python bench/run.py            # full run
    .venv/bin/python bench/run.py --quick    # smaller run, a few seconds
    .venv/bin/python bench/run.py --only W1,W3 --cprofile /tmp/w.prof

Workloads (see bench/README.md): RAW (bare JetStream round trip), W1 (100 sequential noop
steps), W2 (500-item parallel loop, max_in_flight 50), W3 (50 concurrent executions of 20 noop
steps), W4 (100 sequential python steps). Prints a table and writes bench/results/latest.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import hops
from common import cpu_s, raw_concurrent, raw_round_trips, reset_peak_rss, rss_mb

from noetl_stream.bus.connection import Bus, connect
from noetl_stream.bus.nats_server import NatsServer, binary_version, start_nats_server
from noetl_stream.bus.provision import provision
from noetl_stream.server.execution_ids import new_execution_id
from noetl_stream.services import run_services, submit_and_watch

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"

SHORT_CHAIN = 20  # steps of the chain W1's marginal step cost is measured against
STEP_VS_RAW = 1.5  # a sequential step costs at most this many bare JetStream round trips
GROWTH_LIMIT = 1.2  # the last tenth of a long execution costs at most this much its first tenth
GROW_LOOP_IN_FLIGHT = 50
GROW_RSS_MB = 300.0
GROW_TIMEOUT_S = 240.0

# Targets: (field of the row, comparison, value).
TARGETS: dict[str, tuple[str, str, float]] = {
    "W1": ("ms_per_step", "<=", 3.0),
    "W4": ("ms_per_step", "<=", 8.0),
    "W3": ("steps_per_s", ">=", 3000.0),
    "W3-RSS": ("rss_mb", "<=", 300.0),
}


# -- playbooks ---------------------------------------------------------------------------------
def chain_playbook(name: str, steps: int, kind: str = "noop", padded: bool = False) -> str:
    """`steps` sequential steps s1 -> s2 -> ... -> sN, each one task of `kind` (a noop whose
    result is the payload's `pad` when `padded`)."""
    if kind == "noop" and padded:
        tool = '{kind: noop, input: {pad: "{{ workload.pad }}"}}'  # the payload gives `pad`
    elif kind == "noop":
        tool = "{kind: noop}"
    elif kind == "python":
        tool = "{kind: python, code: 'result = {\"i\": 1}'}"
    else:
        raise ValueError(kind)
    lines = ["apiVersion: noetl.io/v2", "kind: Playbook", "metadata:", f"  name: {name}",
             "workflow:"]
    for i in range(1, steps + 1):
        lines.append(f"  - step: s{i}")
        lines.append(f"    tool: {tool}")
        if i < steps:
            lines.append(f"    next: {{arcs: [{{step: s{i + 1}}}]}}")
    return "\n".join(lines) + "\n"


def loop_playbook(name: str, max_in_flight: int) -> str:
    """One step looping over `workload.items` in parallel, `max_in_flight` iterations at a time."""
    return "\n".join([
        "apiVersion: noetl.io/v2", "kind: Playbook", "metadata:", f"  name: {name}",
        "workload:", "  items: []",
        "workflow:",
        "  - step: fan",
        "    loop:",
        '      in: "{{ workload.items }}"',
        "      iterator: item",
        f"      spec: {{mode: parallel, max_in_flight: {max_in_flight}}}",
        "    tool: {kind: noop}",
    ]) + "\n"


# -- measurements ------------------------------------------------------------------------------
@dataclass
class Row:
    workload: str
    steps: int
    wall_s: float
    description: str = ""
    runs: list[float] = field(default_factory=list)  # wall seconds of each repetition
    rss_mb: float | None = None
    nats_rss_mb: float | None = None
    status: str = "ok"
    target: str = ""
    met: bool | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def ms_per_step(self) -> float:
        return self.wall_s * 1000 / self.steps if self.steps else 0.0

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["steps_per_s"] = round(self.steps_per_s, 1)
        out["ms_per_step"] = round(self.ms_per_step, 4)
        out["wall_s"] = round(self.wall_s, 4)
        out["runs"] = [round(r, 4) for r in self.runs]
        out["best_wall_s"] = round(min(self.runs), 4) if self.runs else None
        return out


class RssSampler:
    """Peak VmRSS of this process (server + worker live here) and of the nats-server child.

    The kernel keeps each process's peak (VmHWM), started again on entry (`clear_refs`), so
    nothing is read while the workload runs. Where that is not allowed the RSS is sampled every
    `every_s` instead, which reads /proc in the measured process (about 5% of its event loop in
    a W3 profile).
    """

    def __init__(self, nats_pid: int | None, every_s: float = 0.02) -> None:
        self.nats_pid = nats_pid
        self.every_s = every_s
        self.peak = 0.0
        self.nats_peak = 0.0
        self._task: asyncio.Task[None] | None = None
        self._kernel_peaks = False

    def sample(self, field: str = "VmRSS") -> None:
        self.peak = max(self.peak, rss_mb("self", field) or 0.0)
        if self.nats_pid is not None:
            self.nats_peak = max(self.nats_peak, rss_mb(self.nats_pid, field) or 0.0)

    async def _run(self) -> None:
        while True:
            self.sample()
            await asyncio.sleep(self.every_s)

    def __enter__(self) -> RssSampler:
        self._kernel_peaks = reset_peak_rss() and (self.nats_pid is None
                                                   or reset_peak_rss(self.nats_pid))
        self.sample()
        if not self._kernel_peaks:
            self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        self.sample("VmHWM" if self._kernel_peaks else "VmRSS")
        if self._task is not None:
            self._task.cancel()


class SizeTap:
    """Counts and sizes of commands, events and router state writes (core subscriptions beside
    the streams: they see copies and change no consumer). Costs some CPU, so it is opt-in."""

    SUBJECTS = {"commands": "noetl.commands.>", "events": "noetl.events.>",
                "kv_state": "$KV.noetl_executions.>",
                # outbox marks and stored step results (and earlier releases' attempt claims)
                "kv_step_results": "$KV.noetl_step_results.>"}

    def __init__(self, bus: Bus) -> None:
        self.bus = bus
        self.subs: list[Any] = []
        self.reset()

    def reset(self) -> None:
        self.count = dict.fromkeys(self.SUBJECTS, 0)
        self.bytes = dict.fromkeys(self.SUBJECTS, 0)
        self.max = dict.fromkeys(self.SUBJECTS, 0)

    async def start(self) -> None:
        for name, subject in self.SUBJECTS.items():
            async def cb(msg: Any, name: str = name) -> None:
                self.count[name] += 1
                self.bytes[name] += len(msg.data)
                self.max[name] = max(self.max[name], len(msg.data))
            self.subs.append(await self.bus.nc.subscribe(subject, cb=cb))

    async def stop(self) -> None:
        for sub in self.subs:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()

    def report(self, steps: int) -> dict[str, Any]:
        return {name: {"count": self.count[name], "per_step": round(self.count[name] / steps, 2),
                       "avg_bytes": round(self.bytes[name] / self.count[name]) if self.count[name]
                       else 0, "max_bytes": self.max[name]}
                for name in self.SUBJECTS}


# -- executions --------------------------------------------------------------------------------
async def execute(bus: Bus, text: str, name: str, payload: dict[str, Any] | None = None,
                  timeout_s: float = 600.0) -> tuple[float, dict[str, Any]]:
    t0 = time.perf_counter()
    final = await submit_and_watch(bus, playbook_text=text, playbook_file=f"bench/{name}.yaml",
                                   payload=payload or {}, on_event=lambda _e: None,
                                   execution_id=new_execution_id(), timeout_s=timeout_s)
    return time.perf_counter() - t0, final


def _check_final(final: dict[str, Any], what: str) -> str:
    status = str(final.get("status") or final.get("event_type"))
    if status != "completed":
        err = final.get("error") or final.get("errors")
        print(f"  !! {what} ended {status}: {err}", file=sys.stderr)
    return status


async def repeated(bus: Bus, text: str, name: str, repeat: int,
                   payload: dict[str, Any] | None = None) -> tuple[list[float], str]:
    walls = []
    status = "completed"
    for _ in range(repeat):
        wall, final = await execute(bus, text, name, payload)
        walls.append(wall)
        s = _check_final(final, name)
        if s != "completed":
            status = s
    return walls, status


@dataclass
class Plan:
    raw_n: int
    w1_steps: int
    w2_items: int
    w2_max_in_flight: int
    w3_executions: int
    w3_steps: int
    w4_steps: int
    repeat: int
    grow_steps: int = 0  # GROW-chain: steps of a long chain with 2 KB results
    grow_items: int = 0  # GROW-loop: items of a long parallel loop


FULL = Plan(raw_n=2000, w1_steps=100, w2_items=500, w2_max_in_flight=50, w3_executions=50,
            w3_steps=20, w4_steps=100, repeat=3, grow_steps=2000, grow_items=10_000)
QUICK = Plan(raw_n=300, w1_steps=100, w2_items=100, w2_max_in_flight=50, w3_executions=10,
             w3_steps=20, w4_steps=30, repeat=1, grow_steps=400, grow_items=2000)


class Profiler:
    """Optional cProfile around the measured parts only (the set-up is left out)."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self.prof = cProfile.Profile() if path else None

    @contextlib.contextmanager
    def on(self) -> Any:
        if self.prof is None:
            yield
            return
        self.prof.enable()
        try:
            yield
        finally:
            self.prof.disable()

    def save(self) -> None:
        if self.prof is not None and self.path:
            self.prof.dump_stats(self.path)
            print(f"profile written to {self.path}", file=sys.stderr)


async def bench(plan: Plan, only: set[str], prof: Profiler,
                sizes: bool = False) -> tuple[list[Row], dict[str, Any]]:
    rows: list[Row] = []

    def want(workload: str) -> bool:
        return not only or workload.upper() in only or workload.split("-")[0].upper() in only

    with tempfile.TemporaryDirectory(prefix="noetl-bench-") as tmp:
        nats: NatsServer = await start_nats_server(Path(tmp) / "nats", record=False)
        nats_pid = nats.process.pid if nats.process is not None else None
        env = {"nats_server": str(nats.binary), "nats_version": binary_version(nats.binary)
               if nats.binary else None}
        try:
            bus = await connect(nats.url, name="noetl-bench")
            try:
                await provision(bus, ("default",))
                rows += await run_raw(bus, plan, want, prof)
                async with run_services(bus):
                    await warm_up(bus)
                    tap = SizeTap(bus) if sizes else None
                    if tap is not None:
                        await tap.start()
                    rows += await run_workloads(bus, plan, want, prof, nats_pid, tap)
                    if tap is not None:
                        await tap.stop()
            finally:
                await bus.close()
        finally:
            await nats.stop()
    return rows, env


async def run_raw(bus: Bus, plan: Plan, want: Callable[[str], bool], prof: Profiler) -> list[Row]:
    rows = []
    variants = [("RAW", 1, False, "publish cmd -> fetch(1) -> publish ev -> fetch(1), ack_sync"),
                ("RAW-b", 64, False, "same, fetch(64) as worker/router batches"),
                ("RAW+KV", 1, True, "RAW + revision-checked KV update (1 KB) per trip")]
    for tag, batch, kv, desc in variants:
        if not want(tag) and not want("RAW"):
            continue
        with prof.on():
            wall = await raw_round_trips(bus, plan.raw_n, batch=batch, kv=kv,
                                         tag=tag.replace("+", "").replace("-", ""))
        rows.append(Row(tag, plan.raw_n, wall, desc, [wall]))
        print(f"  {tag:7} {wall * 1000 / plan.raw_n:.3f} ms/round trip", file=sys.stderr)
    if want("RAW-W3") or want("RAW"):
        steps = plan.w3_executions * plan.w3_steps
        walls = []
        for _ in range(plan.repeat):
            with prof.on():
                walls.append(await raw_concurrent(bus, plan.w3_executions, plan.w3_steps,
                                                  tag="RAWW3"))
        wall = statistics.median(walls)
        rows.append(Row("RAW-W3", steps, wall, "W3's shape with only the messages the delivery "
                        "rules require: command and event stored, acked, a KV commit per step",
                        walls))
        print(f"  RAW-W3  {steps / wall:.0f} steps/s", file=sys.stderr)
    return rows


async def warm_up(bus: Bus) -> None:
    """Warm imports, template caches, python children and the consumers before measuring."""
    for kind in ("noop", "python"):
        _, final = await execute(bus, chain_playbook(f"bench_warm_{kind}", 5, kind),
                                 f"warm_{kind}")
        _check_final(final, f"warm-up {kind}")
    await execute(bus, loop_playbook("bench_warm_loop", 10), "warm_loop",
                  {"items": list(range(20))})


async def run_workloads(bus: Bus, plan: Plan, want: Callable[[str], bool], prof: Profiler,
                        nats_pid: int | None, tap: SizeTap | None = None) -> list[Row]:
    rows = []

    async def timed(tag: str, fn: Callable[[], Awaitable[Row]]) -> None:
        if not want(tag):
            return
        if tap is not None:
            tap.reset()
        cpu0, nats0, wall0 = cpu_s(None), cpu_s(nats_pid), time.perf_counter()
        with prof.on():
            row = await fn()
        wall = time.perf_counter() - wall0
        cpu, nats_cpu = cpu_s(None) - cpu0, cpu_s(nats_pid) - nats0
        # CPU over all repetitions, as a share of their wall time (2 cores: 200% is everything).
        row.extra["cpu_python_pct"] = round(100 * cpu / wall, 1)
        row.extra["cpu_nats_pct"] = round(100 * nats_cpu / wall, 1)
        row.extra["cpu_python_ms_per_step"] = round(1000 * cpu / (row.steps * len(row.runs)), 4)
        row.extra["cpu_nats_ms_per_step"] = round(1000 * nats_cpu / (row.steps * len(row.runs)), 4)
        if tap is not None:
            row.extra["messages"] = tap.report(row.steps * len(row.runs))
        rows.append(row)
        print(f"  {tag:7} {row.ms_per_step:.3f} ms/step  {row.steps_per_s:.0f} steps/s  "
              f"(runs {', '.join(f'{r:.3f}' for r in row.runs)} s; cpu python "
              f"{row.extra['cpu_python_pct']}% nats {row.extra['cpu_nats_pct']}%)", file=sys.stderr)

    async def w1() -> Row:
        text = chain_playbook("bench_w1", plan.w1_steps)
        walls, status = await repeated(bus, text, "w1", plan.repeat)
        row = Row("W1", plan.w1_steps, statistics.median(walls),
                  f"1 execution, {plan.w1_steps} sequential noop steps (median of {plan.repeat})",
                  walls, status=status)
        # The marginal cost of one more step: the same chain, shorter, subtracted; what an
        # execution costs once (request, start, end, the watcher) drops out.
        short = SHORT_CHAIN
        short_walls, short_status = await repeated(bus, chain_playbook("bench_w1s", short),
                                                   "w1s", plan.repeat)
        marginal = Row("W1-step", plan.w1_steps - short,
                       row.wall_s - statistics.median(short_walls),
                       f"marginal cost of a sequential step: W1 minus a {short}-step chain",
                       [w - statistics.median(short_walls) for w in walls],
                       status=status if short_status == "completed" else short_status)
        later.append(marginal)
        return row

    async def w2() -> Row:
        text = loop_playbook("bench_w2", plan.w2_max_in_flight)
        payload = {"items": list(range(plan.w2_items))}
        walls, status = await repeated(bus, text, "w2", plan.repeat, payload)
        return Row("W2", plan.w2_items, statistics.median(walls),
                   f"1 execution, {plan.w2_items}-item parallel loop, max_in_flight "
                   f"{plan.w2_max_in_flight}, noop (median of {plan.repeat})", walls, status=status)

    async def w3() -> Row:
        text = chain_playbook("bench_w3", plan.w3_steps)
        total = plan.w3_executions * plan.w3_steps
        walls = []
        status = "completed"
        sampler = RssSampler(nats_pid)
        per_exec: list[float] = []
        for _ in range(plan.repeat):
            with sampler:
                t0 = time.perf_counter()
                results = await asyncio.gather(*(execute(bus, text, "w3")
                                                 for _ in range(plan.w3_executions)))
                walls.append(time.perf_counter() - t0)
            for wall, final in results:
                per_exec.append(wall)
                if _check_final(final, "w3") != "completed":
                    status = "failed"
        row = Row("W3", total, statistics.median(walls),
                  f"{plan.w3_executions} concurrent executions x {plan.w3_steps} noop steps "
                  f"(median of {plan.repeat})", walls, status=status)
        row.rss_mb = round(sampler.peak, 1)
        row.nats_rss_mb = round(sampler.nats_peak, 1)
        per_exec.sort()
        row.extra["execution_latency_s"] = {"p50": round(per_exec[len(per_exec) // 2], 3),
                                            "max": round(per_exec[-1], 3)}
        return row

    async def w3_stores() -> Row:
        """W1's chain alone, then W3's shape, each once under the tap (bench/hops.py, in a
        process of its own): how long nats-server takes to store a write, idle and under W3.
        """
        if bus.url is None:
            raise RuntimeError("the bench's connection has no URL for the tap")
        alone_text = chain_playbook("bench_w3s_alone", plan.w1_steps)
        w3_text = chain_playbook("bench_w3s", plan.w3_steps)
        async with hops.tapped(bus.url) as alone:
            alone_wall, final = await execute(bus, alone_text, "w3s_alone")
        status = _check_final(final, "w3s_alone")
        total = plan.w3_executions * plan.w3_steps
        async with hops.tapped(bus.url) as loaded:
            t0 = time.perf_counter()
            results = await asyncio.gather(*(execute(bus, w3_text, "w3s")
                                             for _ in range(plan.w3_executions)))
            wall = time.perf_counter() - t0
        if any(_check_final(f, "w3s") != "completed" for _, f in results):
            status = "failed"
        row = Row("W3-stores", total, wall, "nats-server's store latency (a stored publish to its "
                  "ack, fsync included), by stream: a chain alone, then W3's shape, tapped",
                  [wall], status=status)
        row.extra.update(alone=alone, w3=loaded, alone_steps=plan.w1_steps,
                         alone_ms_per_step=round(alone_wall * 1000 / plan.w1_steps, 3))
        return row

    async def w4() -> Row:
        text = chain_playbook("bench_w4", plan.w4_steps, "python")
        walls, status = await repeated(bus, text, "w4", plan.repeat)
        return Row("W4", plan.w4_steps, statistics.median(walls),
                   f"1 execution, {plan.w4_steps} sequential python steps (median of "
                   f"{plan.repeat})", walls, status=status)

    async def grow(tag: str, text: str, done_event: str, count: int,
                   payload: dict[str, Any] | None, desc: str) -> Row:
        """One long execution; the time its first and its last tenth of `done_event`s took."""
        arrivals: list[float] = []

        def on_event(event: dict[str, Any]) -> None:
            if event.get("event_type") == done_event:
                arrivals.append(time.perf_counter())

        sampler = RssSampler(nats_pid)
        with sampler:
            t0 = time.perf_counter()
            try:
                final = await submit_and_watch(
                    bus, playbook_text=text, playbook_file=f"bench/{tag}.yaml",
                    payload=payload or {}, on_event=on_event, execution_id=new_execution_id(),
                    timeout_s=GROW_TIMEOUT_S)
            except TimeoutError:
                # Recorded, not hidden: how far it got says where it stopped.
                final = {"status": f"stalled after {len(arrivals)} of {count}"}
            wall = time.perf_counter() - t0
        row = Row(tag, count, wall, desc, [wall], status=_check_final(final, tag))
        row.rss_mb = round(sampler.peak, 1)
        tenth = max(1, count // 10)
        if len(arrivals) > 2 * tenth:
            # From the first arrival on, so the execution's start (parsing, the first command)
            # does not count against its first tenth.
            first = arrivals[tenth] - arrivals[0]
            last = arrivals[-1] - arrivals[-tenth - 1]
            row.extra.update(first_ms=round(first * 1000 / tenth, 4),
                             last_ms=round(last * 1000 / tenth, 4),
                             last_vs_first=round(last / first, 3))
        return row

    async def grow_chain() -> Row:
        n = plan.grow_steps
        return await grow("GROW-chain", chain_playbook("bench_grow_chain", n, padded=True),
                          "step.done", n, {"pad": "x" * 2048},
                          f"1 execution, {n} sequential noop steps with 2 KB results: ms per "
                          "step of the last tenth vs the first")

    async def grow_loop() -> Row:
        n = plan.grow_items
        return await grow("GROW-loop", loop_playbook("bench_grow_loop", GROW_LOOP_IN_FLIGHT),
                          "loop.iteration.done", n, {"items": list(range(n))},
                          f"1 execution, a {n}-item parallel loop (max_in_flight "
                          f"{GROW_LOOP_IN_FLIGHT}): ms per iteration of the last tenth vs the "
                          "first; peak RSS of server + worker")

    later: list[Row] = []  # rows a workload adds after its own
    await timed("W1", w1)
    rows += later
    await timed("W2", w2)
    await timed("W3", w3)
    await timed("W3-stores", w3_stores)
    await timed("W4", w4)
    if plan.grow_steps:
        await timed("GROW-chain", grow_chain)
    if plan.grow_items:
        await timed("GROW-loop", grow_loop)
    return rows


# -- report ------------------------------------------------------------------------------------
def judge(rows: list[Row]) -> list[Row]:
    """Attach targets; W3's memory target becomes its own row."""
    out = []
    raw = next((r for r in rows if r.workload == "RAW"), None)
    for row in rows:
        if row.workload == "W1-step" and raw is not None:
            limit = STEP_VS_RAW * raw.ms_per_step
            row.target = f"<= {STEP_VS_RAW:g} x RAW ({limit:.2f} ms)"
            row.met = row.ms_per_step <= limit and row.status in ("ok", "completed")
            row.extra["vs_raw"] = round(row.ms_per_step / raw.ms_per_step, 2)
        if row.workload.startswith("GROW") and "last_vs_first" in row.extra:
            growth = row.extra["last_vs_first"]
            row.target = f"last/first <= {GROWTH_LIMIT:g}"
            row.met = growth <= GROWTH_LIMIT and row.status in ("ok", "completed")
            if row.workload == "GROW-loop":
                row.target += f", RSS <= {GROW_RSS_MB:g} MB"
                row.met = row.met and (row.rss_mb or 0.0) <= GROW_RSS_MB
        out.append(row)
        if row.workload in TARGETS:
            _set_target(row, row.workload)
        if row.workload == "W3" and row.rss_mb is not None:
            mem = Row("W3-RSS", row.steps, row.wall_s, "peak VmRSS of the Python process "
                      f"(server + worker) during W3; nats-server child {row.nats_rss_mb} MB",
                      row.runs, rss_mb=row.rss_mb, nats_rss_mb=row.nats_rss_mb, status=row.status)
            _set_target(mem, "W3-RSS")
            out.append(mem)
    return out


def _set_target(row: Row, key: str) -> None:
    attr, op, value = TARGETS[key]
    have = getattr(row, attr)
    unit = {"ms_per_step": "ms/step", "steps_per_s": "steps/s", "rss_mb": "MB"}[attr]
    row.target = f"{op} {value:g} {unit}"
    row.met = (have <= value if op == "<=" else have >= value) and row.status in ("ok", "completed")


def table(rows: list[Row]) -> str:
    head = ("workload", "steps", "wall s", "steps/s", "ms/step", "target", "met?")
    lines = []
    for r in rows:
        if r.workload == "W3-RSS":
            cells = (r.workload, "", "", "", "", r.target,
                     _met(r.met) + f" ({r.rss_mb:.0f} MB; nats {r.nats_rss_mb:.0f} MB)")
        else:
            cells = (r.workload, str(r.steps), f"{r.wall_s:.3f}", f"{r.steps_per_s:.0f}",
                     f"{r.ms_per_step:.3f}", r.target or "-",
                     _met(r.met) if r.met is not None else "-")
            if "last_vs_first" in r.extra:
                cells = (*cells[:-1], f"{cells[-1]} ({r.extra['first_ms']:.2f} -> "
                         f"{r.extra['last_ms']:.2f} ms, x{r.extra['last_vs_first']:.2f}"
                         + (f"; {r.rss_mb:.0f} MB)" if r.workload == "GROW-loop" else ")"))
            if r.status not in ("ok", "completed"):
                cells = (*cells[:-1], f"{cells[-1]} [{r.status}]")
        lines.append(cells)
    widths = [max(len(h), *(len(c[i]) for c in lines)) for i, h in enumerate(head)]
    fmt = "  ".join(f"{{:{'<' if i in (0, 5, 6) else '>'}{w}}}" for i, w in enumerate(widths))
    sep = "  ".join("-" * w for w in widths)
    return "\n".join([fmt.format(*head), sep, *(fmt.format(*c) for c in lines)])


def _met(met: bool | None) -> str:
    return "yes" if met else "NO"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller workloads, one repetition")
    ap.add_argument("--repeat", type=int, default=None, help="repetitions of each workload")
    ap.add_argument("--only", default="",
                    help="comma-separated workloads (RAW,W1,W2,W3,W4,GROW-chain,GROW-loop; any case)")
    ap.add_argument("--cprofile", default=None, metavar="FILE",
                    help="write a cProfile of the measured parts to FILE")
    ap.add_argument("--sizes", action="store_true",
                    help="also count and size commands, events and state writes (costs CPU)")
    ap.add_argument("--no-uvloop", action="store_true", help="use the default asyncio loop")
    ap.add_argument("--out", default=str(RESULTS / "latest.json"), help="JSON results file")
    ap.add_argument("--no-services", action="store_true",
                    help="skip the services-mode run (bench/services.py: separate processes)")
    ap.add_argument("--no-cli", action="store_true",
                    help="skip timing `noetl-stream run` as a command (bench/cli_run.py)")
    ap.add_argument("--no-peer", action="store_true",
                    help="skip the peer column (bench/peer_temporal.py: Temporal's dev server)")
    args = ap.parse_args(argv)

    plan = QUICK if args.quick else FULL
    if args.repeat is not None:
        plan = Plan(**{**asdict(plan), "repeat": max(1, args.repeat)})
    only = {w.strip().upper() for w in args.only.split(",") if w.strip()}
    prof = Profiler(args.cprofile)

    loop_name = "asyncio"
    runner: Callable[[Any], Any] = asyncio.run
    if not args.no_uvloop:
        try:
            import uvloop

            runner = uvloop.run
            loop_name = f"uvloop {uvloop.__version__}"
        except ImportError:
            pass
    print(f"noetl-stream bench ({'quick' if args.quick else 'full'}, {loop_name})", file=sys.stderr)
    started = time.time()
    load_before = os.getloadavg()
    rows, env = runner(bench(plan, only, prof, args.sizes))
    load_after = os.getloadavg()
    prof.save()
    rows = judge(rows)
    print()
    print(table(rows))

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "timestamp": started,
        "mode": "quick" if args.quick else "full",
        "plan": asdict(plan),
        "environment": {"python": sys.version.split()[0], "loop": loop_name,
                        "platform": platform.platform(), "cpus": os.cpu_count(),
                        # Other processes on the machine make the figures noisy: check these.
                        "loadavg_before": [round(x, 2) for x in load_before],
                        "loadavg_after": [round(x, 2) for x in load_after], **env},
        "targets": {k: {"field": f, "op": op, "value": v} for k, (f, op, v) in TARGETS.items()},
        "rows": [r.to_json() for r in rows],
        "all_targets_met": all(r.met for r in rows if r.met is not None),
    }
    out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"\nresults written to {out}", file=sys.stderr)
    if not args.no_services and args.cprofile is None:
        # The same stack deployed as separate processes, printed after the in-process table.
        import services

        splan = services.QUICK if args.quick else services.FULL
        if args.repeat is not None:
            splan = services.Plan(**{**asdict(splan), "repeat": max(1, args.repeat)})
        print()
        services.run(splan, only, out.with_name("services.json"))
    if not only and args.cprofile is None:  # the whole bench: the headline table closes it
        finish(args, out)
    return 0


def finish(args: argparse.Namespace, out: Path) -> None:
    """`noetl-stream run` as a command, the peer column, then the headline table of all parts."""
    import cli_run
    import peer_temporal
    import summary

    repeat = 1 if args.quick else max(3, args.repeat or 3)
    if not args.no_cli:
        print()
        cli_run.run(repeat, out.with_name("cli_run.json"))
    if not args.no_peer:
        print()
        peer_temporal.run(peer_temporal.Plan(repeat=repeat), out.with_name("peer_temporal.json"))
    text, doc = summary.report(out.parent)
    print("\nThe headline figures, each with its target and the RAW of the same run:\n")
    print(text)
    out.with_name("summary.json").write_text(json.dumps(doc, indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
