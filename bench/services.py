"""Benchmarks with the stack deployed as separate processes, the way the README runs it.

    .venv/bin/python bench/services.py            # full run (about two minutes)
    .venv/bin/python bench/services.py --quick    # smaller run
    .venv/bin/python bench/services.py --only PROBE-idle,W1-noop

A `nats-server` (from the wheel), one `noetl-stream server` and one `noetl-stream worker` run as
child processes; this process only publishes execution requests and listens to their events with
a core subscription, as a client with the nats CLI would. Workloads (bench/README.md):

- PROBE-idle: a 3-step noop execution every 1-3 s (random, seeded), so the system idles between
  requests; latency from request publish to `execution.completed`, and the largest gap between
  two consecutive events of one execution.
- PROBE-busy: the same executions back to back.
- W1: 100 sequential steps, each reading the previous step's result.
- W2: a 200-item loop with at most 10 iterations in flight, then one step aggregating it.
- W3: 20 concurrent executions of 10 sequential steps.
W1-W3 run with `noop` and with `python` steps. RAW is the bare JetStream round trip measured in
the same run, from this process. Peak PSS (judged) and peak RSS are sums over every process of
the stack (server, worker and its python children, nats-server), sampled while the workloads
run (bench/memory.py says why PSS).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from common import cpu_s, raw_round_trips
from memory import Reading, TreeSampler, breakdown
from probe_trace import Probe, Tap, cost_between, cost_summary, schedstat_ns, slow_hops_report

from noetl_stream.bus.connection import Bus, connect
from noetl_stream.bus.nats_server import start_nats_server
from noetl_stream.bus.provision import provision
from noetl_stream.messages import ExecutionRequest
from noetl_stream.server.execution_ids import new_execution_id
from noetl_stream.state.kv_keys import bucket_keys

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
CLI = Path(sys.executable).parent / "noetl-stream"
TERMINAL = ("execution.completed", "execution.failed", "execution.cancelled")

# Targets of the services-mode figures: (row, field, comparison, value).
TARGETS: list[tuple[str, str, str, float]] = [
    ("PROBE-idle", "p50_ms", "<=", 7.0),
    ("PROBE-idle", "p99_ms", "<=", 20.0),
    ("PROBE-idle", "max_gap_ms", "<=", 20.0),
    ("W3-python", "steps_per_s", ">=", 1500.0),
]


# -- playbooks ---------------------------------------------------------------------------------
def _tool(kind: str, prev: str | None) -> str:
    """One task that reads the previous step's `i` (the first starts from 0) and adds one."""
    if kind == "noop":
        read = f'"{{{{ {prev}.i + 1 }}}}"' if prev else "1"
        return f"{{kind: noop, input: {{i: {read}}}}}"
    if kind == "python":
        read = f'"{{{{ {prev}.i }}}}"' if prev else "0"
        return f"{{kind: python, input: {{prev: {read}}}, code: 'result = {{\"i\": prev + 1}}'}}"
    raise ValueError(kind)


def chain_playbook(name: str, steps: int, kind: str) -> str:
    """s1 -> s2 -> ... -> sN; each step's task reads the previous step's result."""
    lines = ["apiVersion: noetl.io/v2", "kind: Playbook", "metadata:", f"  name: {name}",
             "workflow:"]
    for i in range(1, steps + 1):
        lines.append(f"  - step: s{i}")
        lines.append(f"    tool: {_tool(kind, f's{i - 1}' if i > 1 else None)}")
        if i < steps:
            lines.append(f"    next: {{arcs: [{{step: s{i + 1}}}]}}")
    return "\n".join(lines) + "\n"


def loop_playbook(name: str, kind: str, max_in_flight: int) -> str:
    """A parallel loop over `workload.items`, then one step that sums what the loop returned."""
    if kind == "noop":
        body = 'tool: {kind: noop, input: {i: "{{ item }}"}}'
        total = 'tool: {kind: noop, input: {n: "{{ fan | length }}"}}'
    else:
        body = "tool: {kind: python, input: {i: \"{{ item }}\"}, code: 'result = {\"i\": i}'}"
        total = ("tool: {kind: python, input: {rows: \"{{ fan }}\"}, "
                 "code: 'result = {\"n\": len(rows)}'}")
    return "\n".join([
        "apiVersion: noetl.io/v2", "kind: Playbook", "metadata:", f"  name: {name}",
        "workload:", "  items: []",
        "workflow:",
        "  - step: fan",
        "    loop:",
        '      in: "{{ workload.items }}"',
        "      iterator: item",
        f"      spec: {{mode: parallel, max_in_flight: {max_in_flight}}}",
        f"    {body}",
        "    next: {arcs: [{step: total}]}",
        "  - step: total",
        f"    {total}",
    ]) + "\n"


# -- the stack ---------------------------------------------------------------------------------
@dataclass
class Stack:
    bus: Bus
    nats_pid: int | None
    procs: dict[str, subprocess.Popen[bytes]]
    url: str = ""

    def pids(self) -> list[int]:
        roots = [p.pid for p in self.procs.values()]
        if self.nats_pid is not None:
            roots.append(self.nats_pid)
        return [pid for root in roots for pid in _tree(root)]


def _tree(pid: int) -> list[int]:
    """`pid` and its descendants (the worker's python children among them)."""
    out = [pid]
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                for child in f.read().split():
                    out.extend(_tree(int(child)))
    except OSError:
        pass
    return out


@contextlib.asynccontextmanager
async def services_stack(tmp: Path, *, concurrency: int, servers: int = 1,
                         log_commits: bool = False) -> AsyncIterator[Stack]:
    nats = await start_nats_server(tmp / "nats", record=False)
    env = {**os.environ, "NOETL_STREAM_HOME": str(tmp / "home"),
           "NOETL_STREAM_NATS_URL": nats.url}
    procs: dict[str, subprocess.Popen[bytes]] = {}
    logs = {}
    try:
        bus = await connect(nats.url, name="noetl-bench-client")
        try:
            # As `noetl-stream run` does; the server provisions the same topology as it starts.
            await provision(bus, ("default",))
            # Several servers share the router's partitions (docs/several-servers.md).
            # With log_commits they log each commit and revision conflict (-vv), for counting.
            server = ["-vv", "server"] if log_commits else ["server"]
            roles = [("server" if n == 0 else f"server{n + 1}", server) for n in range(servers)]
            for role, args in (*roles,
                               ("worker", ["worker", "--concurrency", str(concurrency)])):
                logs[role] = open(tmp / f"{role}.log", "wb")  # noqa: SIM115 - closed below
                procs[role] = subprocess.Popen([str(CLI), *args], env=env, stdout=logs[role],
                                               stderr=subprocess.STDOUT)
            stack = Stack(bus, nats.process.pid if nats.process is not None else None, procs,
                          nats.url)
            yield stack
        finally:
            await bus.close()
    finally:
        for proc in procs.values():
            proc.send_signal(signal.SIGTERM)
        for proc in procs.values():
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
        for f in logs.values():
            f.close()
        await nats.stop()


# -- one execution, timed from outside -----------------------------------------------------------
@dataclass
class Timing:
    status: str
    latency_s: float
    max_gap_s: float
    events: int
    execution_id: str = ""
    started: float = 0.0  # perf_counter() at the request's publish


async def timed_execution(bus: Bus, text: str, name: str,
                          payload: dict[str, Any] | None = None,
                          timeout_s: float = 300.0) -> Timing:
    """Publish a request and follow `<prefix>.events.<id>.>` with a core subscription (what a
    client with the nats CLI sees); every event's arrival is stamped on receipt."""
    execution_id = new_execution_id()
    prefix = f"{bus.topology.prefix}.events.{execution_id}."
    arrivals: list[float] = []
    done: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def on_event(msg: Any) -> None:
        arrivals.append(time.perf_counter())
        event_type = msg.subject[len(prefix):]
        if event_type in TERMINAL and not done.done():
            done.set_result(event_type.split(".", 1)[1])

    sub = await bus.nc.subscribe(prefix + ">", cb=on_event)
    try:
        request = ExecutionRequest(execution_id=execution_id, playbook=text,
                                   playbook_file=f"bench/{name}.yaml", payload=payload or {})
        t0 = time.perf_counter()
        await bus.js.publish(bus.topology.execute_request_subject(),
                             request.model_dump_json().encode(),
                             headers={"Nats-Msg-Id": f"req:{execution_id}"})
        status = await asyncio.wait_for(done, timeout_s)
        end = time.perf_counter()
    finally:
        await sub.unsubscribe()
    stamps = [t0, *arrivals]
    gap = max((b - a for a, b in itertools.pairwise(stamps)), default=0.0)
    return Timing(status, end - t0, gap, len(arrivals), execution_id, t0)


# -- rows ---------------------------------------------------------------------------------------
@dataclass
class Row:
    workload: str
    unit: str
    value: float
    description: str
    runs: list[float] = field(default_factory=list)
    status: str = "completed"
    extra: dict[str, Any] = field(default_factory=dict)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _status(timings: list[Timing]) -> str:
    bad = [t.status for t in timings if t.status != "completed"]
    return bad[0] if bad else "completed"


@dataclass
class Plan:
    idle_n: int
    busy_n: int
    w1_steps: int
    w2_items: int
    w2_max_in_flight: int
    w3_executions: int
    w3_steps: int
    raw_n: int
    repeat: int
    seed: int = 7


FULL = Plan(idle_n=24, busy_n=60, w1_steps=100, w2_items=200, w2_max_in_flight=10,
            w3_executions=20, w3_steps=10, raw_n=1000, repeat=3)
QUICK = Plan(idle_n=6, busy_n=20, w1_steps=100, w2_items=200, w2_max_in_flight=10,
             w3_executions=20, w3_steps=10, raw_n=300, repeat=1)


async def probes(stack: Stack, plan: Plan, trace: Path | None = None) -> list[Row]:
    """PROBE-idle and PROBE-busy; each probe's CPU and run-queue wait of the stack's processes
    are read before and after it (probe_trace.py), and with `trace` PROBE-idle runs under a tap
    whose report of the slowest probes' hops is written there.
    """
    rows = []
    bus = stack.bus
    text = chain_playbook("bench_probe", 3, "noop")
    rng = random.Random(plan.seed)
    for tag, n, idle in (("PROBE-idle", plan.idle_n, True), ("PROBE-busy", plan.busy_n, False)):
        timings, costs = [], []
        tap = Tap() if idle and trace is not None else None
        if tap is not None:
            await tap.start(stack.url)
        for _ in range(n):
            if idle:
                await asyncio.sleep(rng.uniform(1.0, 3.0))
            pids = stack.pids()
            before = schedstat_ns(pids)
            timings.append(await timed_execution(bus, text, "probe"))
            costs.append(cost_between(before, schedstat_ns(pids)))
        lat = [t.latency_s * 1000 for t in timings]
        if tap is not None and trace is not None:
            await asyncio.sleep(0.2)  # the last acks
            await tap.stop()
            trace.write_text(slow_hops_report(tap.seen, [
                Probe(t.execution_id, t.started, t.started + t.latency_s) for t in timings]) + "\n")
            print(f"  hops of the slowest PROBE-idle probes written to {trace}", file=sys.stderr)
        row = Row(tag, "ms", statistics.median(lat),
                  f"{n} executions of 3 noop steps, "
                  + ("one every 1-3 s" if idle else "back to back"),
                  [round(v, 3) for v in lat], _status(timings))
        row.extra = {"p50_ms": round(_pct(lat, 0.5), 3), "p90_ms": round(_pct(lat, 0.9), 3),
                     "p99_ms": round(_pct(lat, 0.99), 3), "max_ms": round(max(lat), 3),
                     "max_gap_ms": round(max(t.max_gap_s for t in timings) * 1000, 3),
                     **cost_summary(lat, costs)}
        rows.append(row)
        x = row.extra
        _say(row, f"p50 {x['p50_ms']} ms, p99 {x['p99_ms']} ms, max {x['max_ms']} ms, largest "
                  f"event gap {x['max_gap_ms']} ms; the stack's CPU / run-queue wait per probe: "
                  f"median probes {x['median_probe_cpu_ms']} / {x['median_probe_wait_ms']} ms, "
                  f"slowest 5% {x['slow_probe_cpu_ms']} / {x['slow_probe_wait_ms']} ms")
    return rows


async def workloads(bus: Bus, plan: Plan, want: Callable[[str], bool]) -> list[Row]:
    rows: list[Row] = []

    async def repeated(tag: str, steps: int, desc: str,
                       once: Callable[[], Awaitable[list[Timing]]]) -> None:
        if not want(tag):
            return
        walls, timings = [], []
        for _ in range(plan.repeat):
            t0 = time.perf_counter()
            timings += await once()
            walls.append(time.perf_counter() - t0)
        wall = statistics.median(walls)
        row = Row(tag, "ms/step", wall * 1000 / steps, desc, [round(w, 4) for w in walls],
                  _status(timings))
        row.extra = {"steps": steps, "steps_per_s": round(steps / wall, 1)}
        rows.append(row)
        _say(row, f"{row.value:.3f} ms/step, {row.extra['steps_per_s']} steps/s")

    for kind in ("noop", "python"):
        w1 = chain_playbook(f"bench_w1_{kind}", plan.w1_steps, kind)
        w2 = loop_playbook(f"bench_w2_{kind}", kind, plan.w2_max_in_flight)
        w3 = chain_playbook(f"bench_w3_{kind}", plan.w3_steps, kind)
        items = {"items": list(range(plan.w2_items))}

        async def one_w1(text: str = w1) -> list[Timing]:
            return [await timed_execution(bus, text, "w1")]

        async def one_w2(text: str = w2, items: dict[str, Any] = items) -> list[Timing]:
            return [await timed_execution(bus, text, "w2", items)]

        async def one_w3(text: str = w3) -> list[Timing]:
            return list(await asyncio.gather(*(timed_execution(bus, text, "w3")
                                               for _ in range(plan.w3_executions))))

        await repeated(f"W1-{kind}", plan.w1_steps,
                       f"1 execution, {plan.w1_steps} sequential {kind} steps, each reading the "
                       "previous result", one_w1)
        await repeated(f"W2-{kind}", plan.w2_items + 1,
                       f"{plan.w2_items}-item {kind} loop, max_in_flight {plan.w2_max_in_flight}, "
                       "then an aggregation step", one_w2)
        await repeated(f"W3-{kind}", plan.w3_executions * plan.w3_steps,
                       f"{plan.w3_executions} concurrent executions x {plan.w3_steps} {kind} "
                       "steps", one_w3)
    return rows


async def held_partitions(bus: Bus, since: float) -> dict[str, list[int]] | None:
    """Server id -> the router partitions it holds, from the servers' heartbeats in KV; None
    while some server's last heartbeat is older than `since` (it may not show the latest pins).
    """
    kv = await bus.js.key_value("noetl_runtime")
    held: dict[str, list[int]] = {}
    for key in await bucket_keys(bus.js, "noetl_runtime", "server.router.>"):
        beat = json.loads((await kv.get(key)).value or b"{}")
        if time.time() - float(beat.get("heartbeat_at", 0)) > 25:
            continue  # a server of an earlier run
        if float(beat["heartbeat_at"]) < since:
            return None
        held[key[len("server.router."):]] = sorted(beat.get("partitions") or [])
    return held


async def spread_pins(bus: Bus, servers: int, deadline_s: float = 90.0) -> dict[str, list[int]]:
    """Run short executions until every partition of the router is pinned and no server holds
    more than its share, as the servers' heartbeats say (server/partitions.py: a partition is
    pinned when its first event comes, and pins move to the servers that prefer them every few
    seconds). Returns the layout, spread or not by the deadline. Nothing to wait for on a build
    whose servers share one router consumer.
    """
    router = getattr(bus.topology, "router", None)
    if router is None:
        return {}
    share = -(-router.partitions // servers)
    one = chain_playbook("bench_spread", 1, "noop")
    deadline = time.monotonic() + deadline_s
    held: dict[str, list[int]] | None = {}
    while time.monotonic() < deadline:
        since = time.time()
        await asyncio.gather(*(timed_execution(bus, one, "spread") for _ in range(48)))
        while (held := await held_partitions(bus, since)) is None and \
                time.monotonic() < deadline:
            await asyncio.sleep(1.0)
        if held is not None and len(held) == servers and \
                sum(len(p) for p in held.values()) == router.partitions and \
                max(len(p) for p in held.values()) <= share:
            return held
    print(f"  router partitions NOT spread over {servers} servers after {deadline_s:g} s: "
          f"{held}", file=sys.stderr)
    return held or {}


def _say(row: Row, text: str) -> None:
    flag = "" if row.status == "completed" else f"  [{row.status}]"
    print(f"  {row.workload:11} {text}{flag}", file=sys.stderr)


async def warm_up(bus: Bus, deadline_s: float = 60.0) -> None:
    """Wait for server and worker to come up: the first execution completes once both run."""
    for kind in ("noop", "python"):
        timing = await timed_execution(bus, chain_playbook(f"bench_warm_{kind}", 3, kind),
                                       "warm", timeout_s=deadline_s)
        if timing.status != "completed":
            raise RuntimeError(f"warm-up execution ended {timing.status}")
    await timed_execution(bus, loop_playbook("bench_warm_loop", "python", 5), "warm",
                          {"items": list(range(10))}, timeout_s=deadline_s)


def log_sizes(folder: Path) -> dict[str, int]:
    return {path.stem: path.stat().st_size for path in folder.glob("server*.log")}


def commit_counts(folder: Path, since: dict[str, int]) -> dict[str, dict[str, int]]:
    """Commits and revision conflicts each server logged (with -vv) after `since` (its log's size
    when the workloads began), by server.
    """
    counts = {}
    for path in sorted(folder.glob("server*.log")):
        with path.open("rb") as f:
            f.seek(since.get(path.stem, 0))
            text = f.read().decode(errors="replace")
        counts[path.stem] = {
            "commits": len(re.findall(r"noetl_stream\.server: committed \d+ events", text)),
            "conflicts": len(re.findall(r"noetl_stream\.server: revision conflict on ", text))}
    return counts


async def bench(plan: Plan, only: set[str], servers: int = 1,
                log_commits: bool = False, trace: Path | None = None) -> dict[str, Any]:
    def want(tag: str) -> bool:
        return not only or tag.upper() in only or tag.split("-")[0].upper() in only

    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="noetl-bench-services-") as tmp:
        async with services_stack(Path(tmp), concurrency=64, servers=servers,
                                  log_commits=log_commits) as stack:
            if want("RAW"):
                wall = await raw_round_trips(stack.bus, plan.raw_n, batch=1, kv=False, tag="SVC")
                raw = Row("RAW", "ms", wall * 1000 / plan.raw_n,
                          "bare JetStream round trip from the client process, same nats-server")
                rows.append(raw)
                _say(raw, f"{raw.value:.3f} ms per round trip")
            await warm_up(stack.bus)
            spread_started = time.monotonic()
            pins = await spread_pins(stack.bus, servers)
            if pins:
                print(f"  router partitions per server {sorted(len(p) for p in pins.values())}, "
                      f"spread {time.monotonic() - spread_started:.1f} s "
                      "after the warm-up", file=sys.stderr)
            logged_before = log_sizes(Path(tmp))
            sampler = TreeSampler(stack.pids)
            sampler.start()
            cpu0 = {role: cpu_s(p.pid) for role, p in stack.procs.items()}
            t0 = time.perf_counter()
            if want("PROBE"):
                rows += await probes(stack, plan, trace)
            rows += await workloads(stack.bus, plan, want)
            wall = time.perf_counter() - t0
            sampler.stop()
            cpu = {role: round(100 * (cpu_s(p.pid) - cpu0[role]) / wall, 1)
                   for role, p in stack.procs.items()}
        commits = commit_counts(Path(tmp), logged_before) if log_commits else {}
    rss, pss = sampler.peak_rss, sampler.peak_pss
    assert rss is not None and pss is not None  # stop() sampled once at least
    return {"rows": rows, "peak_rss_mb": rss.rss_mb, "peak_pss_mb": pss.pss_mb,
            "peak_rss_by_role": rss.by_role, "peak_pss_by_role": pss.by_role, "cpu_pct": cpu,
            "commits": commits}


def judge(rows: list[Row]) -> list[dict[str, Any]]:
    verdicts = []
    by_name = {r.workload: r for r in rows}
    for tag, fld, op, value in TARGETS:
        row = by_name.get(tag)
        if row is None:
            continue
        have = float(row.extra[fld])
        met = (have <= value if op == "<=" else have >= value) and row.status == "completed"
        verdicts.append({"workload": tag, "field": fld, "have": have, "target": f"{op} {value:g}",
                         "met": met})
    return verdicts


def table(rows: list[Row], peak_rss: float, peak_pss: float) -> str:
    lines = [("workload", "figure", "detail")]
    for r in rows:
        if r.workload.startswith("PROBE"):
            fig = f"p50 {r.extra['p50_ms']:.1f} ms"
            detail = (f"p99 {r.extra['p99_ms']:.1f} ms, max {r.extra['max_ms']:.1f} ms, "
                      f"largest gap {r.extra['max_gap_ms']:.1f} ms")
        elif r.workload == "RAW":
            fig, detail = f"{r.value:.3f} ms", "per round trip"
        else:
            fig = f"{r.value:.3f} ms/step"
            detail = f"{r.extra['steps_per_s']:.0f} steps/s"
        if r.status != "completed":
            detail += f" [{r.status}]"
        lines.append((r.workload, fig, detail))
    lines.append(("peak PSS", f"{peak_pss:.0f} MB", "server + worker + python children + nats"))
    lines.append(("peak RSS", f"{peak_rss:.0f} MB", "the same, pages shared by forks counted "
                                                    "once per process"))
    widths = [max(len(c[i]) for c in lines) for i in range(3)]
    out = [f"{a:<{widths[0]}}  {b:>{widths[1]}}  {c}" for a, b, c in lines]
    out.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(out)


def run(plan: Plan, only: set[str], out: Path, servers: int = 1,
        log_commits: bool = False, trace: Path | None = None) -> dict[str, Any]:
    """Run the services-mode benchmark, print its table, write `out`; return the document."""
    print(f"noetl-stream bench, services mode (nats-server, {servers} server(s), worker: "
          "separate processes)", file=sys.stderr)
    load_before = os.getloadavg()
    result = asyncio.run(bench(plan, only, servers, log_commits, trace))
    rows: list[Row] = result["rows"]
    verdicts = judge(rows)
    print()
    print(table(rows, result["peak_rss_mb"], result["peak_pss_mb"]))
    for measure in ("pss", "rss"):
        print(f"at the peak of {measure.upper()}, by process:")
        print(breakdown(Reading(0.0, 0.0, result[f"peak_{measure}_by_role"])))
    commits = result["commits"]
    if commits:
        made = sum(c["commits"] for c in commits.values())
        lost = sum(c["conflicts"] for c in commits.values())
        print(f"commits {made}, revision conflicts {lost} "
              f"({100 * lost / max(1, made):.2f} per 100 commits): {commits}")
    for v in verdicts:
        print(f"  target {v['workload']} {v['field']} {v['target']}: have {v['have']} -> "
              f"{'met' if v['met'] else 'MISSED'}")
    doc = {"timestamp": time.time(), "mode": "services", "servers": servers, "plan": asdict(plan),
           "environment": {"python": sys.version.split()[0], "cpus": os.cpu_count(),
                           "loadavg_before": [round(x, 2) for x in load_before],
                           "loadavg_after": [round(x, 2) for x in os.getloadavg()]},
           "rows": [asdict(r) for r in rows], "peak_rss_mb": result["peak_rss_mb"],
           "peak_pss_mb": result["peak_pss_mb"], "peak_rss_by_role": result["peak_rss_by_role"],
           "peak_pss_by_role": result["peak_pss_by_role"],
           "cpu_pct_of_wall": result["cpu_pct"], "commits": commits, "targets": verdicts}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"\nresults written to {out}", file=sys.stderr)
    return doc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer probes, one repetition")
    ap.add_argument("--repeat", type=int, default=None, help="repetitions of W1-W3")
    ap.add_argument("--only", default="", help="comma-separated: RAW,PROBE,W1,W2,W3 or full names")
    ap.add_argument("--out", default=str(RESULTS / "services.json"), help="JSON results file")
    ap.add_argument("--servers", type=int, default=1,
                    help="noetl-stream server processes sharing the router's partitions")
    ap.add_argument("--log-commits", action="store_true",
                    help="run the servers with -vv and count the commits and revision "
                         "conflicts they log (logging slows them down)")
    ap.add_argument("--trace-probes", default=None, metavar="FILE",
                    help="run PROBE-idle under a tap on `>` and write the hops of its slowest "
                         "probes to FILE (the tap slows every probe a little)")
    ap.add_argument("--w3", default="", metavar="EXECUTIONS,STEPS",
                    help="W3's size: concurrent executions, sequential steps each (20,10)")
    args = ap.parse_args(argv)
    plan = QUICK if args.quick else FULL
    if args.repeat is not None:
        plan = Plan(**{**asdict(plan), "repeat": max(1, args.repeat)})
    if args.w3:
        executions, steps = (int(x) for x in args.w3.split(","))
        plan = Plan(**{**asdict(plan), "w3_executions": executions, "w3_steps": steps})
    only = {w.strip().upper() for w in args.only.split(",") if w.strip()}
    run(plan, only, Path(args.out), max(1, args.servers), args.log_commits,
        Path(args.trace_probes) if args.trace_probes else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
