"""What a python step costs in the worker's tool, by how executions share interpreters.

Runs `PythonTool` in this process (no NATS: only the tool and its child processes) and times
`result = 1` steps: many steps of one execution one after another (the interpreter is kept for
its next step), one step each of many executions one after another (each gets a fresh
interpreter, forked from the fork server), and the same with eight at a time. Under a root
worker the children run as uids of their own, wherever the interpreter is installed.

    .venv/bin/python bench/python_children.py [--steps 200] [--processes 8]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Callable

from noetl_stream.tools.base import TaskCall
from noetl_stream.tools.python import PythonTool


def _call(execution_id: str, n: int) -> TaskCall:
    return TaskCall(execution_id=execution_id, step="s", task="t", kind="python",
                    config={"code": "result = 1"}, input={}, spec={},
                    idempotency_key=f"{execution_id}-{n}")


async def _w3_shape(tool: PythonTool, rounds: int, executions: int, steps: int,
                    gap_s: float) -> list[float]:
    """W3's shape in the tool alone: `executions` at once, each `steps` steps one after another
    (`result = {"i": prev + 1}`), `gap_s` between them standing for the engine's share of a
    step; a new set of executions each round, right after the last. The wall time per round.
    """

    async def execution(execution_id: str) -> None:
        prev = 0
        for n in range(steps):
            call = TaskCall(execution_id=execution_id, step=f"s{n}", task="t", kind="python",
                            config={"code": 'result = {"i": prev + 1}'}, input={"prev": prev},
                            spec={}, idempotency_key=f"{execution_id}-{n}")
            outcome = await tool.run(call)
            assert outcome.ok and isinstance(outcome.result, dict), outcome.error
            prev = outcome.result["i"]
            await asyncio.sleep(gap_s)

    walls = []
    for r in range(rounds):
        started = time.perf_counter()
        await asyncio.gather(*(execution(f"w3-{r}-{e}") for e in range(executions)))
        walls.append(time.perf_counter() - started)
    return walls


async def _timed(tool: PythonTool, calls: list[TaskCall], parallel: int) -> list[float]:
    lock = asyncio.Semaphore(parallel)
    times: list[float] = []

    async def one(call: TaskCall) -> None:
        async with lock:
            start = time.perf_counter()
            outcome = await tool.run(call)
            times.append(time.perf_counter() - start)
            assert outcome.ok, outcome.error

    started = time.perf_counter()
    await asyncio.gather(*(one(c) for c in calls))
    times.append(time.perf_counter() - started)  # the wall clock of all, last
    return times


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--processes", type=int, default=8)
    parser.add_argument("--w3", type=int, default=0, metavar="ROUNDS",
                        help="only W3's shape (20 executions x 10 steps), this many rounds")
    parser.add_argument("--gap-ms", type=float, default=2.0,
                        help="W3 shape: the engine's share of a step, between an execution's steps")
    args = parser.parse_args()
    tool = PythonTool(max_children=args.processes)
    await tool.start()
    if args.w3:
        try:
            walls = await _w3_shape(tool, args.w3, 20, 10, args.gap_ms / 1000)
        finally:
            await tool.close()
        rates = sorted(200 / w for w in walls)
        print(f"W3 shape, 20 x 10 steps, gap {args.gap_ms:g} ms: median "
              f"{statistics.median(rates):.0f} steps/s (rounds {', '.join(f'{r:.0f}' for r in rates)}; "
              f"gaps alone {200 / (10 * args.gap_ms / 1000):.0f})")
        return
    cases: dict[str, tuple[Callable[[int], str], int]] = {
        "one execution, sequential": (lambda n: "e-one", 1),
        "a new execution per step, sequential": (lambda n: f"e-{n}", 1),
        "a new execution per step, 8 at a time": (lambda n: f"p-{n}", 8),
    }
    try:
        print(f"{'case':<40} {'median ms':>10} {'p95 ms':>8} {'steps/s':>8}")
        for name, (execution_of, parallel) in cases.items():
            calls = [_call(execution_of(n), n) for n in range(args.steps)]
            *times, wall = await _timed(tool, calls, parallel)
            p95 = statistics.quantiles(times, n=20)[-1]
            print(f"{name:<40} {statistics.median(times) * 1000:>10.1f} {p95 * 1000:>8.1f} "
                  f"{args.steps / wall:>8.0f}")
    finally:
        await tool.close()


if __name__ == "__main__":
    asyncio.run(main())
