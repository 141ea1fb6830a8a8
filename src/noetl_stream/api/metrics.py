"""Prometheus text format (version 0.0.4), written by hand: a few gauges and one histogram.

The step latency histogram counts the `step.done` and `step.failed` events this API process sees
on a core NATS subscription while it runs (their `duration_ms`), so it starts empty at every
start and, with several API processes, each counts every step. Gauges are read from JetStream
when /metrics is scraped.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping

STEP_BUCKETS_S = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


class Histogram:
    def __init__(self, bounds: tuple[float, ...] = STEP_BUCKETS_S) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one is +Inf
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value

    def lines(self, name: str, labels: Mapping[str, str]) -> list[str]:
        out, running = [], 0
        for bound, count in zip((*self.bounds, float("inf")), self.counts, strict=True):
            running += count
            le = "+Inf" if bound == float("inf") else f"{bound:g}"
            out.append(sample(f"{name}_bucket", {**labels, "le": le}, running))
        out.append(sample(f"{name}_sum", labels, self.total))
        out.append(sample(f"{name}_count", labels, running))
        return out


class Metrics:
    """What the API observes between scrapes."""

    def __init__(self) -> None:
        self.step_seconds: dict[str, Histogram] = {}  # by outcome: done | failed

    def observe_step(self, outcome: str, duration_ms: float) -> None:
        self.step_seconds.setdefault(outcome, Histogram()).observe(duration_ms / 1000.0)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def sample(name: str, labels: Mapping[str, str], value: float) -> str:
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
    text = f"{value:g}" if isinstance(value, float) else str(value)
    return f"{name}{{{inner}}} {text}" if inner else f"{name} {text}"


def family(name: str, kind: str, help_text: str, lines: Iterable[str]) -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *lines]
