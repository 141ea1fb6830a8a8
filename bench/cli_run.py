"""What a user times first: `noetl-stream run` of a noop chain, as a command, end to end.

    .venv/bin/python bench/cli_run.py            # 1-, 100- and 300-step chains, 3 times each
    .venv/bin/python bench/cli_run.py --repeat 5

Each run is the whole command (`noetl-stream run chainN.yaml`, progress on stderr as a user
sees it, its own embedded nats-server in a fresh NOETL_STREAM_HOME), so what every run pays
once (interpreter start, imports, the embedded server's start and stop) is in each figure.
Subtracting the 1-step chain's median from the 100- and 300-step chains' leaves the marginal
cost of a step through `run`: parsing it, routing it, running it, following and printing it.
On a busy machine the command's start moves by a second or more from run to run, which drowns
what 100 steps add; so each row also gives the same difference of the executions' own
durations, from the first event's time to the end event's, as the progress's last line shows
them (`  3.10s  completed ...`): the steps alone, without the command's start and stop.
RAW, the bare JetStream round trip, is measured beside it on a nats-server with the embedded
server's configuration, before and after the runs (their median is the reference).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import raw_round_trips
from run import chain_playbook

from noetl_stream.bus.connection import connect
from noetl_stream.bus.nats_server import start_nats_server

HERE = Path(__file__).resolve().parent
CLI = Path(sys.executable).parent / "noetl-stream"
CHAINS = (1, 100, 300)
STEP_VS_RAW = 1.5  # a step through `run` costs at most this many bare round trips
RAW_N = 500
# The progress's last line: the execution's own duration, from its events' times.
COMPLETED_LINE = re.compile(rb"^\s*(\d+(?:\.\d+)?)s\s+completed\b", re.MULTILINE)


async def _raw_ms(folder: Path) -> float | None:
    """The bare round trip, ms, on a nats-server configured as the embedded one; None when an
    acknowledgement timed out (a saturated machine): the other measurement stands alone."""
    nats = await start_nats_server(folder, record=False)
    try:
        bus = await connect(nats.url, name="noetl-bench-raw")
        try:
            wall = await raw_round_trips(bus, RAW_N, batch=1, kv=False, tag="CLIRAW")
        except TimeoutError as exc:  # nats-py's timeouts are TimeoutErrors
            print(f"  RAW not measured: {type(exc).__name__}: {exc}", file=sys.stderr)
            return None
        finally:
            await bus.close()
    finally:
        await nats.stop()
    return wall * 1000 / RAW_N


def _run_once(playbook: Path, home: Path) -> tuple[float, float]:
    """Seconds of one `noetl-stream run`, and of its execution as its progress showed it; or
    raise when it did not complete.
    """
    env = {**os.environ, "NOETL_STREAM_HOME": str(home)}
    env.pop("NO_COLOR", None)
    t0 = time.perf_counter()
    done = subprocess.run([str(CLI), "run", str(playbook)], env=env, capture_output=True,
                          timeout=600, check=False)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        tail = done.stderr.decode(errors="replace").strip().splitlines()[-3:]
        raise RuntimeError(f"noetl-stream run {playbook.name} exited {done.returncode}: {tail}")
    shown = COMPLETED_LINE.findall(done.stderr)
    if not shown:
        raise RuntimeError(f"noetl-stream run {playbook.name}: no `completed` line in its progress")
    return wall, float(shown[-1])


def measure(repeat: int) -> dict[str, Any]:
    """The RUN-step rows: walls of each chain, the marginal ms per step, RAW beside them."""
    with tempfile.TemporaryDirectory(prefix="noetl-bench-run-") as tmp:
        folder = Path(tmp)
        books = {}
        for n in CHAINS:
            books[n] = folder / f"chain{n}.yaml"
            books[n].write_text(chain_playbook(f"bench_run_chain{n}", n))
        raw = [asyncio.run(_raw_ms(folder / "raw-before"))]
        _run_once(books[1], folder / "home-warm")  # the first start pays the disk cache
        walls: dict[int, list[float]] = {n: [] for n in CHAINS}
        inrun: dict[int, list[float]] = {n: [] for n in CHAINS}
        for i in range(repeat):  # interleaved, so a disturbance spreads over every chain
            for n in CHAINS:
                wall, shown = _run_once(books[n], folder / f"home-{n}-{i}")
                walls[n].append(wall)
                inrun[n].append(shown)
                print(f"  run chain{n:<4} {wall:.3f} s (execution {shown:.2f} s)", file=sys.stderr)
        raw.append(asyncio.run(_raw_ms(folder / "raw-after")))
    measured = [r for r in raw if r is not None]
    if not measured:
        raise RuntimeError("RAW could not be measured beside the runs (acknowledgements timed out)")
    raw_ms = statistics.median(measured)
    base = statistics.median(walls[1])
    rows = []
    # How far the start of a command moved between runs: a difference smaller than that says
    # nothing about a step (on a saturated machine it can even come out negative).
    spread = max(walls[1]) - min(walls[1])
    for n in CHAINS[1:]:
        added = statistics.median(walls[n]) - base
        step_ms = added * 1000 / (n - 1)
        inrun_ms = (statistics.median(inrun[n]) - statistics.median(inrun[1])) * 1000 / (n - 1)
        limit = STEP_VS_RAW * raw_ms
        rows.append({"workload": f"RUN-step-{n}", "ms_per_step": round(step_ms, 3),
                     "inrun_ms_per_step": round(inrun_ms, 3),
                     "inrun_vs_raw": round(inrun_ms / raw_ms, 2),
                     "vs_raw": round(step_ms / raw_ms, 2), "raw_ms": round(raw_ms, 3),
                     "target": f"<= {STEP_VS_RAW:g} x RAW ({limit:.2f} ms)",
                     "met": step_ms <= limit if added > spread else None,
                     "start_spread_s": round(spread, 3),
                     "description": f"`noetl-stream run` of a {n}-step noop chain minus a "
                                    "1-step one, per step added"})
    return {"repeat": repeat, "raw_ms_runs": [None if r is None else round(r, 3) for r in raw],
            "raw_ms": round(raw_ms, 3),
            "walls_s": {str(n): [round(w, 3) for w in ws] for n, ws in walls.items()},
            "executions_s": {str(n): ws for n, ws in inrun.items()},
            "rows": rows}


def report(doc: dict[str, Any]) -> str:
    lines = [f"`noetl-stream run`, whole command (RAW beside it {doc['raw_ms']:.3f} ms):"]
    for n, ws in doc["walls_s"].items():
        lines.append(f"  chain of {n:>3}: median {statistics.median(ws):.3f} s (runs "
                     f"{', '.join(f'{w:.3f}' for w in ws)})")
    for row in doc["rows"]:
        verdict = {True: "met", False: "MISSED", None: "not judged: the steps added less "
                   f"than the 1-step runs' spread ({row['start_spread_s']:.2f} s)"}[row["met"]]
        lines.append(f"  {row['workload']}: {row['ms_per_step']:.3f} ms/step = {row['vs_raw']} x "
                     f"RAW; target {row['target']}: {verdict}; in the execution alone "
                     f"{row['inrun_ms_per_step']:.3f} ms/step = {row['inrun_vs_raw']} x RAW")
    return "\n".join(lines)


def run(repeat: int, out: Path) -> dict[str, Any]:
    print("noetl-stream bench: `noetl-stream run` as a command", file=sys.stderr)
    load_before = os.getloadavg()
    doc = measure(repeat)
    doc["environment"] = {"loadavg_before": [round(x, 2) for x in load_before],
                          "loadavg_after": [round(x, 2) for x in os.getloadavg()],
                          "cpus": os.cpu_count()}
    print(report(doc))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"results written to {out}", file=sys.stderr)
    return doc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3, help="runs of each chain (median)")
    ap.add_argument("--out", default=str(HERE / "results" / "cli_run.json"))
    args = ap.parse_args(argv)
    run(max(1, args.repeat), Path(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
