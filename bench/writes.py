"""Stored writes per step of chains whose steps read and return small results.

    .venv/bin/python bench/writes.py                 # 5 executions of 20 steps, noop and python
    .venv/bin/python bench/writes.py --executions 10 --steps 50

The chains of bench/services.py (each step reads the previous step's `i` and returns `{"i": i + 1}`)
run in process on an embedded nats-server, with bench/run.py's core taps beside the streams
(`SizeTap`): commands, events, state commits (`noetl_executions`) and writes to
`noetl_step_results` (stored step results, pages and outbox marks), per step. bench/run.py's own
chains are noop steps without input, whose null results are written nowhere.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

from run import SizeTap, execute
from services import chain_playbook

from noetl_stream.bus.connection import connect
from noetl_stream.bus.nats_server import start_nats_server
from noetl_stream.bus.provision import provision
from noetl_stream.services import run_services


async def measure(executions: int, steps: int) -> None:
    with tempfile.TemporaryDirectory(prefix="noetl-writes-") as tmp:
        nats = await start_nats_server(Path(tmp) / "nats", record=False)
        bus = await connect(nats.url, name="noetl-bench-writes")
        try:
            await provision(bus, ("default",))
            async with run_services(bus):
                for kind in ("noop", "python"):
                    text = chain_playbook(f"bench_writes_{kind}", steps, kind)
                    await execute(bus, text, "warm-up")
                    tap = SizeTap(bus)
                    await tap.start()
                    for _ in range(executions):
                        _, final = await execute(bus, text, kind)
                        if final.get("status") != "completed":
                            print(f"{kind}: ended {final.get('status')}: {final.get('error')}",
                                  file=sys.stderr)
                    await bus.nc.flush()
                    await tap.stop()
                    report = tap.report(executions * steps)
                    print(f"{kind:6} " + "  ".join(
                        f"{name} {row['per_step']}/step ({row['avg_bytes']} B)"
                        for name, row in report.items()))
        finally:
            await bus.close()
            await nats.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--executions", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args()
    asyncio.run(measure(args.executions, args.steps))


if __name__ == "__main__":
    main()
