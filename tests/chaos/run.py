"""Run the fault-injection scenarios and print the table.

    python tests/chaos/run.py [--scenario NAME ...] [--executions N] [--seed S]

Every scenario gets a fresh nats-server store and fresh processes; a fault-free reference run goes
first. The exit code is 1 when any scenario failed a check (the must-be-zero columns included).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import secrets
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from harness import Harness, Knobs, Row, load_kinds, table
from ledger import Ledger, start_ledger
from scenarios import BY_NAME, SCENARIOS, Scenario


async def run_scenarios(selected: list[Scenario], *, executions: int, seed: int, knobs: Knobs,
                        folder: Path, log: bool = True) -> list[Row]:
    """The reference run, then each selected scenario; one row each."""
    ledger = Ledger()
    runner = await start_ledger(ledger)
    harness = Harness(folder, knobs, ledger, load_kinds())
    rows: list[Row] = []
    try:
        for scenario in [BY_NAME["baseline"], *(s for s in selected if s.name != "baseline")]:
            why = scenario.unavailable()
            if why is not None:
                rows.append(Row(scenario.name, not_run=why))
                continue
            rng = random.Random(f"{seed}:{scenario.name}")
            started = time.monotonic()
            row = await harness.run(scenario.name, scenario.fault, n=executions, rng=rng,
                                    servers=scenario.servers, workers=scenario.workers,
                                    stack_factory=scenario.stack)
            if scenario.name == "baseline":
                harness.reference_wall_s = row.wall_s
            rows.append(row)
            if log:
                print(f"{scenario.name}: {'ok' if row.ok else 'FAIL'} "
                      f"({time.monotonic() - started:.1f} s)", file=sys.stderr, flush=True)
    finally:
        await runner.cleanup()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", action="append", choices=sorted(BY_NAME),
                        help="Run only this scenario (repeatable); default: all.")
    parser.add_argument("--executions", type=int, default=16, help="Executions per scenario.")
    parser.add_argument("--seed", type=int, default=None, help="Seed of the fault moments.")
    parser.add_argument("--lease", type=float, default=3.0, help="Command lease (AckWait), s.")
    parser.add_argument("--keep", action="store_true", help="Keep stores and logs afterwards.")
    args = parser.parse_args()
    seed = args.seed if args.seed is not None else secrets.randbelow(10**6)
    selected = [BY_NAME[n] for n in args.scenario] if args.scenario else list(SCENARIOS)
    print(f"chaos: seed {seed} (reproduce with --seed {seed}), {args.executions} executions "
          f"per scenario, lease {args.lease:g} s", flush=True)
    folder = Path(tempfile.mkdtemp(prefix="noetl-chaos-"))
    started = time.monotonic()
    rows = asyncio.run(run_scenarios(selected, executions=args.executions, seed=seed,
                                     knobs=Knobs(lease_s=args.lease), folder=folder))
    print(table(rows))
    print(f"\ntotal {time.monotonic() - started:.0f} s, seed {seed}")
    failed = [r.scenario for r in rows if not r.ok]
    if failed or args.keep:
        print(f"stores and process logs kept in {folder}")
    else:
        shutil.rmtree(folder, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
