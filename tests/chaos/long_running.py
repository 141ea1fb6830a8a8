"""The long-running scenario: executions that outlive the retention many times, with kills.

It runs on a stack of its own (its own nats-server, server and worker processes) whose
NOETL_STREAM_RETENTION is 2 s, beside the scenario's usual workload (which needs its finished
executions kept until the harness has read them, so it runs on the default retention). There, a
listener timer due in 7 s and a wait on a signal for 8 s run while the server is killed -9
twice and the worker once. Both must complete, the timer not before it was due, the waiting
execution's first event must still be stored when it is signalled, and both must be purged by the
retention once they finished, not before.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from harness import PLAYBOOKS, Run, Stack, connect_client, retrying

from noetl_stream import ids, jsonutil
from noetl_stream.messages import ExecutionRequest

RETENTION_S = 2.0
TIMER_S = 7.0
WAIT_S = 8.0


async def long_running(run: Run) -> None:
    stack = Stack(run.stack.folder / "long", run.knobs, servers=1, workers=1)
    stack.extra_env = {"NOETL_STREAM_RETENTION": f"{RETENTION_S:g}s"}
    await stack.start_nats()
    try:
        await stack.start()
        client = await connect_client(stack.urls)
        try:
            await _scenario(run, stack, client.js)
        finally:
            await client.nc.close()
    finally:
        await stack.stop()


async def _scenario(run: Run, stack: Stack, js: Any) -> None:
    tag = "long"
    problems = len(run.problems)
    timer, waits = f"{tag}timer", f"{tag}wait"
    deadline = time.monotonic() + 60
    started = time.time()
    for execution_id, name in ((timer, "long_timer.yaml"), (waits, "long_wait.yaml")):
        request = ExecutionRequest(execution_id=execution_id,
                                   playbook=(PLAYBOOKS / name).read_text(), playbook_file=name)
        await retrying(lambda r=request: js.publish(
            "noetl.requests.execute", r.model_dump_json().encode(),
            headers={"Nats-Msg-Id": ids.request_msg_id(r.execution_id)}),
            deadline=deadline, what=f"submit {execution_id}")
    t0 = time.monotonic()
    # Watched from now on: a finished execution is gone a retention (2 s) after it ends.
    watched = asyncio.gather(*(_ends_then_goes(run, js, e, started) for e in (timer, waits)))
    for at in sorted(run.rng.uniform(1.0, WAIT_S - 2) for _ in range(2)):
        await asyncio.sleep(max(0.0, at - (time.monotonic() - t0)))
        server = stack.of("server")[0]
        await stack.kill(server)
        run.notes.append(f"server killed at {time.monotonic() - t0:.1f} s")
        await asyncio.sleep(run.rng.uniform(0.2, 1.0))
        await stack.restart(server)
    worker = stack.of("worker")[0]
    await stack.kill(worker)
    run.notes.append(f"worker killed at {time.monotonic() - t0:.1f} s")
    await stack.restart(worker)
    await asyncio.sleep(max(0.0, WAIT_S - (time.monotonic() - t0)))

    first = await _count(js, f"noetl.events.{waits}.execution.started")
    if first != 1:
        run.problems.append(f"the waiting execution lost its first event ({first})")
    await retrying(lambda: js.publish(f"noetl.events.{waits}.signal.approve", b"{}",
                                      headers={"Nats-Msg-Id": f"{tag}-approve"}),
                   deadline=time.monotonic() + 30, what="signal")
    signalled = time.monotonic() - t0
    await watched
    if len(run.problems) == problems:
        run.notes.append(f"a {TIMER_S:g} s timer and an {WAIT_S:g} s wait (signalled at "
                         f"{signalled:.1f} s) completed under a {RETENTION_S:g} s retention, "
                         f"and were purged by {time.monotonic() - t0:.1f} s")


async def _ends_then_goes(run: Run, js: Any, execution_id: str, started: float) -> None:
    final, ended = await _final(js, execution_id, 40)
    if final is None or final.get("status") != "completed":
        run.problems.append(f"{execution_id} ended {final and final.get('status')}")
        return
    if execution_id.endswith("timer") and ended - started < TIMER_S:
        run.problems.append(f"the {TIMER_S:g} s timer fired after "
                            f"{ended - started:.1f} s")
    await _purged(run, js, execution_id, ended)


async def _count(js: Any, subject: str) -> int:
    info = await js.stream_info("NOETL_EVENTS", subjects_filter=subject)
    return sum((info.state.subjects or {}).values())


async def _final(js: Any, execution_id: str, timeout_s: float) -> tuple[dict[str, Any] | None, float]:
    """The terminal event of the execution and when it was stored."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        info = await js.stream_info("NOETL_EVENTS",
                                    subjects_filter=f"noetl.events.{execution_id}.execution.>")
        for subject in info.state.subjects or {}:
            if subject.rsplit(".", 1)[-1] in ("completed", "failed", "cancelled"):
                msg = await js.get_last_msg("NOETL_EVENTS", subject)
                return dict(jsonutil.loads(msg.data)), msg.time.timestamp()
        await asyncio.sleep(0.2)
    return None, 0.0


async def _purged(run: Run, js: Any, execution_id: str, ended: float) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        events = await _count(js, f"noetl.events.{execution_id}.>")
        state = await _count_kv(js, execution_id)
        if events == 0 and state == 0:
            if time.time() - ended < RETENTION_S:
                run.problems.append(f"{execution_id} purged before the retention")
            return
        await asyncio.sleep(0.3)
    run.problems.append(f"{execution_id} not purged after the retention")


async def _count_kv(js: Any, execution_id: str) -> int:
    info = await js.stream_info("KV_noetl_executions",
                                subjects_filter=f"$KV.noetl_executions.{execution_id}")
    return sum((info.state.subjects or {}).values())
