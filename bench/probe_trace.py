"""Where a probe's time goes, for bench/services.py's PROBE rows.

Two readings, both taken outside the timed window:

- `/proc/<pid>/task/*/schedstat` of every process of the stack, before and after each probe:
  the CPU time the stack spent on it and the time its threads waited for a CPU (run-queue
  wait). A probe that is slow because the machine is busy shows the wait grown and the CPU not;
  one slowed by the stack's own extra work (a collection, a sweep) shows the CPU grown.
- With `--trace-probes`, a core subscription on `>` stamps every message nats-server routes
  (the probe's publishes, the acks of stored ones on `_INBOX` replies, the deliveries and their
  acks), so each probe is a list of hops: which hop grows in the slow probes, and what else
  (heartbeats, pull-request expiries, API calls) went through nats-server meanwhile.
"""

from __future__ import annotations

import os
import re
import statistics
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any


# -- CPU and run-queue wait ---------------------------------------------------------------------
def schedstat_ns(pids: Iterable[int]) -> dict[int, tuple[int, int]]:
    """Per process of `pids`, the CPU time and run-queue wait (ns) of its threads, summed; a
    process that is gone is left out.
    """
    out: dict[int, tuple[int, int]] = {}
    for pid in pids:
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        cpu = wait = 0
        for task in tasks:
            try:
                with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                    ran, waited, _ = f.read().split()
            except (OSError, ValueError):
                continue
            cpu += int(ran)
            wait += int(waited)
        out[pid] = (cpu, wait)
    return out


@dataclass(frozen=True)
class ProbeCost:
    """What one probe cost the stack: its CPU time and its threads' run-queue wait, in ms."""

    cpu_ms: float
    wait_ms: float


def cost_between(before: dict[int, tuple[int, int]],
                 after: dict[int, tuple[int, int]]) -> ProbeCost:
    """Summed over the processes read both times (a python child that ended meanwhile took its
    counters with it).
    """
    both = before.keys() & after.keys()
    return ProbeCost(sum(after[p][0] - before[p][0] for p in both) / 1e6,
                     sum(after[p][1] - before[p][1] for p in both) / 1e6)


def cost_summary(latencies_ms: list[float], costs: list[ProbeCost]) -> dict[str, float]:
    """CPU and wait of the median probes (the middle half) against the slowest 5% (at least
    one): the figures a PROBE row carries.
    """
    ranked = sorted(zip(latencies_ms, costs, strict=True), key=lambda pair: pair[0])
    n = len(ranked)
    middle = ranked[n // 4: max(n // 4 + 1, 3 * n // 4)]
    slow = ranked[-max(1, round(n * 0.05)):]

    def med(part: list[tuple[float, ProbeCost]], pick: Callable[[ProbeCost], float]) -> float:
        return round(statistics.median(pick(c) for _, c in part), 2)

    return {"median_probe_cpu_ms": med(middle, lambda c: c.cpu_ms),
            "median_probe_wait_ms": med(middle, lambda c: c.wait_ms),
            "slow_probe_cpu_ms": med(slow, lambda c: c.cpu_ms),
            "slow_probe_wait_ms": med(slow, lambda c: c.wait_ms)}


# -- the tap ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Seen:
    """One message nats-server routed, as the tap received it."""

    at: float  # time.perf_counter()
    subject: str
    reply: str
    data: bytes
    status: str | None = None  # header `Status` of a status message (100, 408, ...)


@dataclass(frozen=True)
class Probe:
    execution_id: str
    started: float  # perf_counter() at the request's publish
    ended: float  # perf_counter() at `execution.completed`'s arrival

    @property
    def latency_ms(self) -> float:
        return (self.ended - self.started) * 1000


def _generic(subject: str, execution_id: str | None) -> str:
    text = subject.replace(execution_id, "X") if execution_id else subject
    text = re.sub(r"\.router\.\d+\.", ".router.P.", text)  # the partition
    return re.sub(r"_INBOX\.[A-Za-z0-9]+(\.[A-Za-z0-9]+)?", "_INBOX", text)


@dataclass
class Labelled:
    """The tap's messages named by what they are and by the execution they belong to."""

    ids: set[str]
    rows: list[tuple[float, str | None, str]] = field(default_factory=list)  # (at, id, label)
    _stored: dict[str, tuple[str | None, str]] = field(default_factory=dict)  # reply -> pub
    _delivered: dict[str, tuple[str | None, str]] = field(default_factory=dict)  # ack subj

    def owner(self, seen: Seen) -> str | None:
        found = next((e for e in self.ids if e in seen.subject), None)
        if found is None and seen.data:
            head = seen.data[:4096]
            found = next((e for e in self.ids if e.encode() in head), None)
        return found

    def add(self, seen: Seen) -> None:
        if seen.subject.startswith("_INBOX"):
            if seen.subject in self._stored:  # the ack of a stored publish
                owner, what = self._stored.pop(seen.subject)
                self.rows.append((seen.at, owner, "stored " + what))
            elif seen.status:
                self.rows.append((seen.at, None, f"pull status {seen.status}"))
            else:
                self.rows.append((seen.at, self.owner(seen), "reply"))
            return
        if seen.subject.startswith("$JS.ACK."):
            owner, what = self._delivered.pop(seen.subject, (None, "?"))
            if seen.reply.startswith("_INBOX"):  # a double ack: nats-server confirms it
                self._stored[seen.reply] = (owner, "ack " + what)
            self.rows.append((seen.at, owner, "ack " + what))
            return
        owner = self.owner(seen)
        what = _generic(seen.subject, owner)
        if seen.subject.startswith("$JS.API."):
            what = "api " + re.sub(r"^\$JS\.API\.((?:[A-Z]+\.)*[A-Z]+)\..*", r"\1", what)
            self.rows.append((seen.at, owner, what))
            return
        if seen.reply.startswith("$JS.ACK."):
            self._delivered[seen.reply] = (owner, what)
            self.rows.append((seen.at, owner, "deliver " + what))
            return
        if seen.reply.startswith("_INBOX"):
            self._stored[seen.reply] = (owner, what)
            self.rows.append((seen.at, owner, "publish " + what))
            return
        self.rows.append((seen.at, owner, "core " + what))


def probe_hops(seen: Iterable[Seen], probes: list[Probe]) -> dict[str, dict[str, float]]:
    """Per probe, ms spent between each of its messages and the next one of it, keyed by
    "from -> to" (a hop taken twice, by two steps, adds up).
    """
    labelled = Labelled({p.execution_id for p in probes})
    for one in sorted(seen, key=lambda s: s.at):
        labelled.add(one)
    mine: dict[str, list[tuple[float, str]]] = defaultdict(list)
    for at, owner, label in labelled.rows:
        if owner is not None:
            mine[owner].append((at, label))
    hops: dict[str, dict[str, float]] = {}
    for probe in probes:
        spent: dict[str, float] = defaultdict(float)
        last_at, last = probe.started, "request"
        for at, label in mine[probe.execution_id]:
            if at > probe.ended:
                break
            spent[f"{last} -> {label}"] += (at - last_at) * 1000
            last_at, last = at, label
        hops[probe.execution_id] = dict(spent)
    return hops


def background(seen: Iterable[Seen], probes: list[Probe]) -> dict[str, Counter[str]]:
    """Per probe, the messages of no probe that nats-server routed during it."""
    labelled = Labelled({p.execution_id for p in probes})
    for one in sorted(seen, key=lambda s: s.at):
        labelled.add(one)
    out: dict[str, Counter[str]] = {}
    for probe in probes:
        out[probe.execution_id] = Counter(
            label for at, owner, label in labelled.rows
            if owner is None and probe.started <= at <= probe.ended)
    return out


def slow_hops_report(seen: list[Seen], probes: list[Probe], top: int = 8) -> str:
    """The hops of the median probe, then, for each of the slowest 5% (at least two), the hops
    that took longest past their median, and the messages of no probe routed meanwhile.
    """
    hops = probe_hops(seen, probes)
    ranked = sorted(probes, key=lambda p: p.latency_ms)
    keys = {k for spent in hops.values() for k in spent}
    median = {k: statistics.median(hops[p.execution_id].get(k, 0.0) for p in ranked) for k in keys}
    lines = [f"hops of the median probe ({ranked[len(ranked) // 2].latency_ms:.1f} ms), ms:"]
    for k, v in sorted(median.items(), key=lambda kv: -kv[1])[:top * 2]:
        lines.append(f"  {v:7.2f}  {k}")
    others = background(seen, probes)
    for probe in ranked[-max(2, round(len(ranked) * 0.05)):]:
        spent = hops[probe.execution_id]
        excess = sorted(((v - median.get(k, 0.0), v, k) for k, v in spent.items()), reverse=True)
        lines.append(f"slow probe {probe.latency_ms:.1f} ms; longest past their median:")
        lines += [f"  +{d:7.2f} ({v:7.2f})  {k}" for d, v, k in excess[:top] if d > 0.5]
        meanwhile = others[probe.execution_id]
        if meanwhile:
            lines.append("  meanwhile: " + ", ".join(f"{n} x {k}" for k, n in meanwhile.most_common()))
    return "\n".join(lines)


class Tap:
    """A core subscription on `>` that keeps every message it receives, stamped."""

    def __init__(self) -> None:
        self.seen: list[Seen] = []
        self._nc: Any = None

    async def start(self, url: str) -> None:
        import nats

        self._nc = await nats.connect(url, name="noetl-bench-tap", pending_size=256 << 20)

        async def keep(msg: Any) -> None:
            status = msg.headers.get("Status") if msg.headers else None
            self.seen.append(Seen(time.perf_counter(), msg.subject, msg.reply or "", msg.data,
                                  status))

        await self._nc.subscribe(">", cb=keep, pending_msgs_limit=10_000_000,
                                 pending_bytes_limit=1 << 30)
        await self._nc.flush()

    async def stop(self) -> None:
        if self._nc is not None:
            await self._nc.close()
            self._nc = None
