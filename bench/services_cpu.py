"""CPU per step of each process of the services stack, for W1 and W3 with noop and python steps.

    .venv/bin/python bench/services_cpu.py                 # 3 rounds of the four workloads
    .venv/bin/python bench/services_cpu.py --rounds 5 --only W3-noop,W3-python

The stack of bench/services.py (nats-server, `noetl-stream server`, `noetl-stream worker` as
separate processes) runs each workload; the CPU time of every process is read from
`/proc/<pid>/task/*/schedstat` before and after it, and divided by the workload's steps. The
worker's python children are counted apart from its fork server (a child's counters go with it
when it ends, so children ended during a workload are missed: their share is a lower bound).
Wall-clock rates on a shared machine follow its load; CPU per step moves far less, so a change
to a process's own work shows here first. Medians over the rounds are printed.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from probe_trace import schedstat_ns
from services import Stack, _tree, chain_playbook, services_stack, timed_execution, warm_up

SHAPES = {"W1": (1, 100), "W3": (20, 10)}  # executions at once, sequential steps each


def roles(stack: Stack) -> dict[int, str]:
    """pid -> its part: server, nats, worker, forkserver (the worker's direct child) or child."""
    worker = stack.procs["worker"].pid
    out = {stack.procs["server"].pid: "server", worker: "worker"}
    if stack.nats_pid is not None:
        out[stack.nats_pid] = "nats"
    for pid in _tree(worker)[1:]:
        try:
            with open(f"/proc/{pid}/stat") as f:
                parent = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        out[pid] = "forkserver" if parent == worker else "child"
    return out


async def one(stack: Stack, tag: str) -> tuple[float, dict[str, float]]:
    """Wall ms per step and CPU ms per step by part, for one run of `tag` (e.g. W3-python)."""
    shape, kind = tag.split("-")
    executions, steps = SHAPES[shape]
    text = chain_playbook(f"bench_cpu_{shape}_{kind}", steps, kind)
    parts = roles(stack)
    before = schedstat_ns(parts)
    started = time.perf_counter()
    timings = await asyncio.gather(*(timed_execution(stack.bus, text, "cpu")
                                     for _ in range(executions)))
    wall = time.perf_counter() - started
    parts.update(roles(stack))
    after = schedstat_ns(parts)
    bad = [t.status for t in timings if t.status != "completed"]
    if bad:
        raise RuntimeError(f"{tag}: an execution ended {bad[0]}")
    total = executions * steps
    cpu: dict[str, float] = {}
    for pid, (ran, _) in after.items():
        part = parts.get(pid, "child")
        cpu[part] = cpu.get(part, 0.0) + (ran - before.get(pid, (0, 0))[0]) / 1e6 / total
    return wall * 1000 / total, cpu


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default="W1-noop,W1-python,W3-noop,W3-python")
    args = parser.parse_args()
    tags = args.only.split(",")
    runs: dict[str, list[tuple[float, dict[str, float]]]] = {tag: [] for tag in tags}
    with tempfile.TemporaryDirectory() as tmp:
        async with services_stack(Path(tmp), concurrency=64) as stack:
            await warm_up(stack.bus)
            for _ in range(args.rounds):
                for tag in tags:
                    runs[tag].append(await one(stack, tag))
                    await asyncio.sleep(0.5)
    for tag, results in runs.items():
        wall = statistics.median(r[0] for r in results)
        names = sorted({name for _, cpu in results for name in cpu})
        cpu = {name: statistics.median(c.get(name, 0.0) for _, c in results) for name in names}
        print(f"{tag:10} {wall:.3f} ms/step wall; CPU ms/step: "
              + ", ".join(f"{name} {value:.3f}" for name, value in cpu.items())
              + f", all {sum(cpu.values()):.3f}")


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
