"""The faults, one coroutine each. A fault runs beside the workload from the first submission on,
picks its moments with the run's seeded RNG, and undoes itself (restart, SIGCONT) before it ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nats
from harness import INJECTED, PLAYBOOKS, Fault, Knobs, Run, Service, Stack, read_stream
from ledger import Phase
from long_running import long_running
from nats.errors import MaxPayloadError
from nats.js.api import StreamConfig
from nats.js.errors import APIError
from trigger_firing import trigger_firing

from noetl_stream import ids, jsonutil
from noetl_stream.bus.nats_server import MAX_PAYLOAD, NatsServer, find_binary, free_port
from noetl_stream.bus.provision import consumer_config
from noetl_stream.bus.storage import storage_refusal
from noetl_stream.messages import ExecutionRequest
from noetl_stream.state.results import ResultStore
from noetl_stream.subjects import load_topology
from noetl_stream.testing import faketime
from noetl_stream.testing.cluster import start_node


@dataclass(frozen=True)
class Scenario:
    name: str
    what: str
    fault: Fault | None
    servers: int = 1
    workers: int = 2
    # Builds the stack when the scenario needs other NATS than one local node; None = default.
    stack: Callable[[Path, Knobs], Awaitable[Stack]] | None = None
    # Why the scenario cannot run here, decided when it is about to run.
    unavailable: Callable[[], str | None] = field(default=lambda: None)


async def _restart_later(run: Run, svc: Service, low: float = 0.2, high: float = 1.0) -> None:
    await asyncio.sleep(run.rng.uniform(low, high))
    await run.stack.restart(svc)


def _elapsed(t0: float) -> str:
    return f"{time.monotonic() - t0:.1f} s"


# -- 1. server ------------------------------------------------------------------------------
async def kill_server(run: Run) -> None:
    """kill -9 of the server at two random moments, restarted after a short pause."""
    t0 = time.monotonic()
    moments = sorted(run.moment(0.05, 0.6) for _ in range(2))
    for at in moments:
        await asyncio.sleep(max(0.0, at - (time.monotonic() - t0)))
        svc = run.stack.of("server")[0]
        await run.stack.kill(svc)
        run.notes.append(f"server killed at {_elapsed(t0)}")
        await _restart_later(run, svc)


async def kill_one_of_two_servers(run: Run) -> None:
    """Two servers share the router's partitions; one is killed and comes back later."""
    await asyncio.sleep(run.moment(0.1, 0.5))
    svc = run.rng.choice(run.stack.of("server"))
    await run.stack.kill(svc)
    run.notes.append(f"server{svc.index} killed")
    await _restart_later(run, svc, 1.0, 3.0)


async def kill_one_of_two_servers_for_good(run: Run) -> None:
    """Two servers share the router's partitions; one is killed and never comes back, so the
    other must take its partitions (when their pins time out) and finish its executions.
    """
    await asyncio.sleep(run.moment(0.1, 0.5))
    svc = run.rng.choice(run.stack.of("server"))
    await run.stack.kill(svc)
    killed = time.monotonic()
    run.notes.append(f"server{svc.index} killed for good")
    while run.running():
        await asyncio.sleep(0.3)
    run.notes.append(f"the last execution ended {_elapsed(killed)} after the kill")


# -- 2. workers around a side effect --------------------------------------------------------
def _aim(run: Run, phase: Phase, action: Callable[[int | None], Awaitable[None]]) -> asyncio.Event:
    """Run `action` with the sender's pid at the k-th effect reaching `phase` (k random)."""
    k = run.rng.randint(1, 6)
    fired = asyncio.Event()
    seen = 0

    async def hook(at: Phase, pid: int | None, call: str) -> None:
        nonlocal seen
        if at != phase or fired.is_set():
            return
        seen += 1
        if seen < k:
            return
        fired.set()
        run.notes.append(f"{phase} effect #{k} ({call.split(':', 1)[-1]})")
        await action(pid)

    run.ledger.hook = hook
    return fired


def _worker_of(run: Run, pid: int | None) -> Service:
    svc = run.stack.service_of_pid(pid) if pid else None
    if svc is None or svc.role != "worker":
        run.notes.append("sender not found in /proc: a random worker was chosen")
        svc = run.rng.choice(run.stack.of("worker"))
    return svc


async def kill_worker_before(run: Run) -> None:
    """kill -9 of a worker at a random moment: most likely between taking commands and their tools."""
    await asyncio.sleep(run.moment(0.1, 0.5))
    svc = run.rng.choice(run.stack.of("worker"))
    await run.stack.kill(svc)
    await _restart_later(run, svc)


def _kill_at(phase: Phase) -> Fault:
    async def fault(run: Run) -> None:
        victims: list[Service] = []

        async def kill(pid: int | None) -> None:
            svc = _worker_of(run, pid)
            await run.stack.kill(svc)
            victims.append(svc)
            if phase == "during":
                await asyncio.sleep(0.3)  # the effect lands after its sender has died

        fired = _aim(run, phase, kill)
        await fired.wait()
        await asyncio.sleep(0.05)
        for svc in victims:
            await _restart_later(run, svc)

    fault.__doc__ = f"kill -9 of the worker whose request is {phase} its side effect"
    return fault


async def kill_worker_while_heartbeating(run: Run) -> None:
    """kill -9 of the worker running a task longer than its lease, after it has heartbeated."""
    while not run.ledger.beat_pids:
        await asyncio.sleep(0.05)
    eid, pid = next(iter(run.ledger.beat_pids.items()))
    await asyncio.sleep(run.rng.uniform(0.5, 1.0) * run.knobs.lease_s)
    svc = _worker_of(run, pid)
    await run.stack.kill(svc)
    run.notes.append(f"killed worker{svc.index} running {eid}'s long task")
    await _restart_later(run, svc)


async def kill_two_workers(run: Run) -> None:
    await asyncio.sleep(run.moment(0.1, 0.5))
    workers = run.stack.of("worker")
    for svc in workers:
        run.stack.signal(svc, signal.SIGKILL)
    for svc in workers:
        if svc.proc is not None:
            await svc.proc.wait()
    await asyncio.sleep(run.rng.uniform(0.3, 1.5))
    for svc in workers:
        await run.stack.restart(svc)


# -- 3. slow but alive ----------------------------------------------------------------------
async def stall_worker(run: Run) -> None:
    """SIGSTOP the worker mid side effect past its lease; another worker takes the redelivered
    command; SIGCONT, and the late worker finishes too: its outcome must count once.
    """
    stopped: list[Service] = []

    async def stop(pid: int | None) -> None:
        svc = _worker_of(run, pid)
        run.stack.signal(svc, signal.SIGSTOP)
        stopped.append(svc)
        # Held here, the request is answered only after the other worker has applied the effect.
        await asyncio.sleep(run.knobs.lease_s * 1.5 + 1.0)

    fired = _aim(run, "during", stop)
    try:
        await fired.wait()
        await asyncio.sleep(run.knobs.lease_s * 2 + 1.5)
    finally:
        for svc in stopped:
            run.stack.signal(svc, signal.SIGCONT)


# -- 4. NATS --------------------------------------------------------------------------------
async def restart_nats(run: Run) -> None:
    """kill -9 of the single nats-server, then a start on the same store and port."""
    await asyncio.sleep(run.moment(0.2, 0.5))
    run.stack.kill_nats()
    down = run.rng.uniform(0.5, 2.0)
    run.notes.append(f"nats-server down {down:.1f} s")
    await asyncio.sleep(down)
    await run.stack.start_nats()


# -- 5. duplicates and poison ---------------------------------------------------------------
async def duplicates_and_poison(run: Run) -> None:
    js = run.client.js
    await asyncio.sleep(run.moment(0.2, 0.4))
    running = run.running()
    # Poison: garbage on a command subject and on an event subject of a running execution.
    await js.publish("noetl.commands.default.python", b"\x00\xff not a command",
                     headers={INJECTED: "poison"})
    if running:
        eid = run.rng.choice(running).execution_id
        for junk in (b"\x00\xff not an event", b'{"unexpected": true}'):
            await js.publish(f"noetl.events.{eid}.step.done.default", junk, headers={INJECTED: "poison"})
        run.notes.append(f"poison command + 2 poison events ({eid})")
    injected = 0
    for p in run.rng.sample(running, min(3, len(running))):
        injected += await _republish(run, p.execution_id, "mid")
    # After the end: the run is no longer in flight, so a late copy must change nothing.
    while run.running():
        await asyncio.sleep(0.3)
    for p in run.rng.sample(run.planned, min(4, len(run.planned))):
        injected += await _republish(run, p.execution_id, "late")
    run.notes.append(f"{injected} outcome copies re-published")
    await _router_drained(run, 20)


async def _republish(run: Run, execution_id: str, when: str) -> int:
    js = run.client.js
    stored = [m for subject in ("step.done", "loop.iteration.done")
              for m in await read_stream(js, f"noetl.events.{execution_id}.{subject}.*", 2.0)]
    if not stored:
        return 0
    m = run.rng.choice(stored)
    msg_id = m.headers.get("Nats-Msg-Id")
    if msg_id:
        # Inside the duplicate window: the stream itself must drop it.
        ack = await js.publish(m.subject, m.data, headers={"Nats-Msg-Id": msg_id})
        if not ack.duplicate:
            run.problems.append(f"stream stored a copy of {msg_id} inside its duplicate window")
    # As if beyond the window: a new msg id, so the stream keeps it and only the router decides.
    await js.publish(m.subject, m.data, headers={"Nats-Msg-Id": f"chaos:{when}:{msg_id}",
                                                 INJECTED: when})
    return 2 if msg_id else 1


async def _router_drained(run: Run, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        infos = [await run.client.js.consumer_info(c.stream, c.durable)
                 for c in load_topology().router_decl().consumers()]
        if all(i.num_pending == 0 and i.num_ack_pending == 0 for i in infos):
            return
        await asyncio.sleep(0.3)
    run.problems.append("router consumer still had events pending")


# -- 6. payload limits ----------------------------------------------------------------------
HUGE_MB = 10


async def payload_limits(run: Run) -> None:
    """A result over the NATS max payload (object store), and a request over it (rejected)."""
    js = run.client.js
    files = (PLAYBOOKS / "big.yaml").read_text()
    tag = run.planned[0].execution_id[:-3]
    huge_result = f"{tag}huge"
    request = ExecutionRequest(execution_id=huge_result, playbook=files, playbook_file="big.yaml",
                               payload={"mb": HUGE_MB, "n": 7})
    await js.publish("noetl.requests.execute", request.model_dump_json().encode(),
                     headers={"Nats-Msg-Id": f"req:{huge_result}"})
    too_big = ExecutionRequest(execution_id=f"{tag}toobig", playbook=files, playbook_file="big.yaml",
                               payload={"blob": "x" * (9 * 1024 * 1024)})
    try:
        await js.publish("noetl.requests.execute", too_big.model_dump_json().encode(),
                         headers={"Nats-Msg-Id": f"req:{tag}toobig"})
        run.problems.append("a request over max_payload was accepted")
    except MaxPayloadError as exc:
        run.notes.append(f"9 MB request rejected ({type(exc).__name__})")
    final = await _final(run, huge_result, 60)
    if final is None:
        run.problems.append(f"{HUGE_MB} MB result: execution stuck")
        return
    final = await ResultStore(js).resolve(final)
    want = {"size": HUGE_MB * 1024 * 1024, "ok": True}
    if final.get("status") != "completed" or final.get("result") != want:
        error = final.get("error") or final.get("result")
        run.problems.append(f"{HUGE_MB} MB result: {final.get('status')}: {str(error)[:160]}")
    else:
        run.notes.append(f"{HUGE_MB} MB result completed through the object store")
    with contextlib.suppress(Exception):
        kv = await js.key_value("noetl_executions")
        keys = await kv.keys()
        if f"{tag}toobig" in keys:
            run.problems.append("the rejected request left an execution behind")


async def _final(run: Run, execution_id: str, timeout_s: float) -> dict[str, Any] | None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        info = await run.client.js.stream_info(
            "NOETL_EVENTS", subjects_filter=f"noetl.events.{execution_id}.execution.>")
        for subject in info.state.subjects or {}:
            if subject.rsplit(".", 1)[-1] in ("completed", "failed", "cancelled", "rejected"):
                msg = await run.client.js.get_last_msg("NOETL_EVENTS", subject)
                value = jsonutil.loads(msg.data)
                return value if isinstance(value, dict) else None
        await asyncio.sleep(0.3)
    return None


# -- 6b. hostile input ----------------------------------------------------------------------
PROBE = (PLAYBOOKS / "probe.yaml").read_text()

RUNAWAY = (PLAYBOOKS / "runaway.yaml").read_text()
PROBE_WITHIN_S = 10.0


async def hostile_input(run: Run) -> None:
    """Floods of invalid and oversized ids, bodies naming another execution than their subject
    (a forged `execution.cancel.requested` for each running execution) and a runaway template,
    beside the workload; a normal execution started in the middle must end within seconds.
    """
    js = run.client.js
    await asyncio.sleep(run.moment(0.05, 0.2))
    tag = run.planned[0].execution_id[:-3]
    huge = "x" * 3000  # a subject a client may publish, far past our 128-character ids
    sends: list[Awaitable[Any]] = []
    for i in range(2000):
        sends.append(js.publish("noetl.events.c:1.signal.go", b"{}"))
        if i % 4 == 0:
            sends.append(js.publish(f"noetl.events.{tag}{i}.step.done.default", jsonutil.dumps(
                {"execution_id": "has space", "step": "a", "step_run_id": "x.a.1"})))
        if i % 20 == 0:
            sends.append(js.publish(f"noetl.events.{huge}.signal.go", b"{}"))
            sends.append(js.publish("noetl.requests.execute", jsonutil.dumps(
                {"execution_id": "x" * 4200, "playbook": PROBE})))
            sends.append(js.publish("noetl.requests.cancel", jsonutil.dumps(
                {"execution_id": "x" * 4200})))
    for p in run.running():  # each running execution is asked to cancel, on a subject not its own
        forged = {"event_type": "execution.cancel.requested", "execution_id": p.execution_id,
                  "reason": "forged", "requested_by": "chaos"}
        sends.append(js.publish(f"noetl.events.{tag}forged.step.done.default", jsonutil.dumps(forged),
                                headers={INJECTED: "forged"}))
    runaway = f"{tag}runaway"
    sends.append(js.publish("noetl.requests.execute", ExecutionRequest(
        execution_id=runaway, playbook=RUNAWAY, playbook_file="runaway.yaml").model_dump_json()
        .encode(), headers={"Nats-Msg-Id": ids.request_msg_id(runaway)}))
    probe = f"{tag}probe"
    flood_started = time.monotonic()
    for start in range(0, len(sends), 500):
        await asyncio.gather(*sends[start:start + 500])
    run.notes.append(f"{len(sends)} hostile messages in {_elapsed(flood_started)}")
    probe_started = time.monotonic()
    await js.publish("noetl.requests.execute", ExecutionRequest(
        execution_id=probe, playbook=PROBE, playbook_file="probe.yaml").model_dump_json().encode(),
        headers={"Nats-Msg-Id": ids.request_msg_id(probe)})
    final = await _final(run, probe, 60)
    took = time.monotonic() - probe_started
    if final is None or final.get("status") != "completed":
        run.problems.append(f"the probe execution did not complete during the flood: {final}")
    elif took > PROBE_WITHIN_S:
        run.problems.append(f"the probe execution took {took:.1f} s (> {PROBE_WITHIN_S:g} s)")
    else:
        run.notes.append(f"probe execution completed in {took:.1f} s during the flood")
    end = await _final(run, runaway, 60)
    error = str((end or {}).get("error") or "")
    if end is None or end.get("status") != "failed" or "template" not in error:
        run.problems.append(f"the runaway template did not fail with its reason: {end}")
    else:
        run.notes.append("runaway template failed with its bound")
    await _router_drained(run, 60)
    redelivered = sum([(await js.consumer_info(c.stream, c.durable)).num_redelivered
                       for c in load_topology().router_decl().consumers()])
    if redelivered:
        run.problems.append(f"{redelivered} refused events were redelivered")


# -- 7. a 3-node cluster --------------------------------------------------------------------
def _cluster_missing() -> str | None:
    try:
        from noetl_stream.testing import cluster  # noqa: F401
    except ImportError:
        return "cluster harness missing (noetl_stream.testing.cluster)"
    return None


class ClusterStack(Stack):
    """The stack on `noetl_stream.testing.cluster`: 3 nodes, streams and buckets at R3."""

    async def open_cluster(self) -> None:
        from noetl_stream.testing.cluster import run_nats_cluster

        self._exit = contextlib.AsyncExitStack()
        self.cluster: Any = await self._exit.enter_async_context(
            run_nats_cluster(self.folder / "cluster", size=3))
        self.urls = list(self.cluster.urls)

    async def node(self, op: str, index: int) -> None:
        result = getattr(self.cluster, op)(index)
        if inspect.isawaitable(result):
            await result

    async def stop(self) -> None:
        try:
            await super().stop()
        finally:
            await self._exit.aclose()


async def cluster_stack(folder: Path, knobs: Knobs) -> Stack:
    stack = ClusterStack(folder, knobs, servers=1, workers=2)
    stack.extra_env = {"NOETL_STREAM_REPLICAS": "3"}
    await stack.open_cluster()
    return stack


async def kill_cluster_node(run: Run) -> None:
    stack = run.stack
    assert isinstance(stack, ClusterStack)
    await asyncio.sleep(run.moment(0.2, 0.5))
    index = run.rng.randrange(3)
    await stack.node("kill", index)
    run.notes.append(f"node {index} killed")
    await asyncio.sleep(run.rng.uniform(1.0, 3.0))
    await stack.node("restart", index)


# -- 8. a full store ------------------------------------------------------------------------
SMALL_STORE = 256 * 1024 * 1024  # max_file_store of the disk-full scenario's nats-server
LEFT_FREE = 48 * 1024 * 1024  # what the stack leaves free for the run; the fault fills it
FILLER = "CHAOS_FILLER"


class SmallStoreStack(Stack):
    """One nats-server whose JetStream may hold SMALL_STORE bytes in all, as a small disk would."""

    async def start_nats(self) -> None:
        folder = self.folder / "nats"
        folder.mkdir(parents=True, exist_ok=True)
        port = self.nats_port or free_port()
        conf = folder / "small.conf"
        conf.write_text(f"listen: 127.0.0.1:{port}\nmax_payload: {MAX_PAYLOAD}\n"
                        f'jetstream {{\n  store_dir: "{folder / "jetstream"}"\n'
                        f"  max_file_store: {SMALL_STORE}\n}}\n")
        process = start_node(conf, folder / "nats-server.log")
        deadline = time.monotonic() + 15
        while not await _listening(port):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"nats-server did not start on {conf}")
            await asyncio.sleep(0.05)
        self.nats = NatsServer(f"nats://127.0.0.1:{port}", port, folder / "jetstream", process,
                               find_binary(), owned=True)
        self.nats_port = port
        self.urls = [self.nats.url]


async def _listening(port: int) -> bool:
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return False
    writer.close()
    await writer.wait_closed()
    return True


async def small_store_stack(folder: Path, knobs: Knobs) -> Stack:
    """The small store, already filled but for LEFT_FREE bytes, so the fault fills the rest in a
    moment; the streams' byte bounds sized to fit it (NOETL_STREAM_STORE_BYTES).
    """
    stack = SmallStoreStack(folder, knobs, servers=1, workers=2)
    stack.extra_env = {"NOETL_STREAM_STORE_BYTES": str(SMALL_STORE - LEFT_FREE)}
    await stack.start_nats()
    assert stack.nats is not None
    nc = await nats.connect(stack.nats.url)
    try:
        js = nc.jetstream()
        await js.add_stream(StreamConfig(name=FILLER, subjects=["chaos.filler.>"]))
        chunk = b"x" * (MAX_PAYLOAD - 4096)
        for _ in range((SMALL_STORE - LEFT_FREE) // len(chunk)):
            await js.publish("chaos.filler.x", chunk)
    finally:
        await nc.close()
    return stack


async def fill_store(run: Run) -> None:
    """The store filled to its last byte while executions run, held full, then space freed: every
    execution must still complete, with the same results and no duplicate."""
    js = run.client.js
    await asyncio.sleep(run.moment(0.1, 0.3))
    written = 0
    for size in (1024 * 1024, 64 * 1024, 4096, 64):
        while True:
            try:
                await js.publish("chaos.filler.x", b"x" * size)
            except APIError as exc:
                if not storage_refusal(exc):
                    run.problems.append(f"filling the store: {exc!r}")
                break
            written += size
    # Longer than a router event's 20 deliveries last at one a second.
    held = run.rng.uniform(25.0, 30.0)
    ended = len(run.terminal)
    await asyncio.sleep(held)
    run.notes.append(f"store full for {held:.1f} s (the last {written // (1024 * 1024)} MB filled); "
                     f"{len(run.terminal) - ended} execution(s) ended meanwhile, "
                     f"{len(run.planned) - len(run.terminal)} waited for space")
    await js.delete_stream(FILLER)


# -- 9. clock skew ---------------------------------------------------------------------------
def _faketime_missing() -> str | None:
    return None if faketime.library() else "libfaketime missing (apt-get install -y faketime)"


class SkewedStack(Stack):
    """Its servers run with their clocks `skew` away (libfaketime); NATS and workers keep time."""

    skew = "-1h"

    async def spawn(self, svc: Service) -> None:
        self.extra_env = faketime.skewed_env(self.skew, {}) if svc.role == "server" else {}
        await super().spawn(svc)


async def skewed_stack(folder: Path, knobs: Knobs) -> Stack:
    stack = SkewedStack(folder, knobs, servers=1, workers=2)
    await stack.start_nats()
    return stack


SKEW_IN_TIME = (PLAYBOOKS / "skew_in_time.yaml").read_text()
SKEW_HUNG = (PLAYBOOKS / "skew_hung.yaml").read_text()
SILENT_POOL = "skewsilent"


async def _submit_probe(run: Run, execution_id: str, playbook: str) -> None:
    await run.client.js.publish("noetl.requests.execute", ExecutionRequest(
        execution_id=execution_id, playbook=playbook, playbook_file=f"{execution_id}.yaml")
        .model_dump_json().encode(), headers={"Nats-Msg-Id": ids.request_msg_id(execution_id)})


async def _skew_probes(run: Run, tag: str) -> None:
    """A step that ends within its 20 s timeout must complete; a step whose command nobody
    takes must fail by its 3 s timeout (5 s with the grace): neither earlier nor 15 s later.
    """
    in_time, hung = f"{tag}intime", f"{tag}hung"
    started = time.monotonic()
    await asyncio.gather(_submit_probe(run, in_time, SKEW_IN_TIME),
                         _submit_probe(run, hung, SKEW_HUNG))
    final = await _final(run, in_time, 60)
    if final is None or final.get("status") != "completed":
        run.problems.append(f"skew {tag}: a step within its timeout did not complete: "
                            f"{(final or {}).get('error')}")
    final = await _final(run, hung, 30)
    took = time.monotonic() - started
    kind = (((final or {}).get("steps") or {}).get("start") or {}).get("error", {}).get("kind")
    if final is None or final.get("status") != "failed" or kind != "timeout" \
            or not 4.5 <= took <= 15:
        run.problems.append(f"skew {tag}: a hung step did not time out after 5 to 15 s "
                            f"({took:.1f} s, {(final or {}).get('status')}, {kind})")
    else:
        run.notes.append(f"skew {tag}: timeouts on time (hung step failed in {took:.1f} s)")


async def skew_clock(run: Run) -> None:
    """The server starts an hour behind nats-server and the workers; at a random moment it is
    killed and comes back an hour ahead. Step timeouts are checked both ways beside the workload.
    """
    stack = run.stack
    assert isinstance(stack, SkewedStack)
    decl = load_topology().pool_consumer(SILENT_POOL)  # a declared pool nobody serves
    await run.client.js.add_consumer(decl.stream, consumer_config(decl))
    await _skew_probes(run, "behind")
    await asyncio.sleep(run.moment(0.1, 0.4))
    svc = stack.of("server")[0]
    await stack.kill(svc)
    stack.skew = "+1h"
    await stack.restart(svc)
    run.notes.append("server restarted an hour ahead")
    await _skew_probes(run, "ahead")


SCENARIOS: tuple[Scenario, ...] = (
    Scenario("baseline", "no fault: the reference results", None),
    Scenario("server-kill", "kill -9 of the server twice, restarted", kill_server),
    Scenario("worker-kill-before", "kill -9 of a worker at a random moment", kill_worker_before),
    Scenario("worker-kill-during", "kill -9 of a worker while its request is held",
             _kill_at("during")),
    Scenario("worker-kill-after", "kill -9 of a worker after its effect, before its ack",
             _kill_at("after")),
    Scenario("worker-kill-heartbeat", "kill -9 of a worker heartbeating a long task",
             kill_worker_while_heartbeating),
    Scenario("worker-stall", "SIGSTOP past the lease, redelivered, SIGCONT", stall_worker),
    Scenario("nats-restart", "kill -9 and restart of the single nats-server", restart_nats),
    Scenario("duplicates-poison", "re-published outcomes, poison command and events",
             duplicates_and_poison),
    Scenario("payload-limits", "a 10 MB result and a 9 MB request", payload_limits),
    Scenario("hostile-input", "floods of invalid, oversized and forged messages, a runaway "
             "template; a normal execution still completes in seconds", hostile_input),
    Scenario("cluster-node-kill", "3-node cluster (R3), kill -9 of one node", kill_cluster_node,
             stack=cluster_stack, unavailable=_cluster_missing),
    Scenario("two-workers-kill", "kill -9 of both workers at once", kill_two_workers),
    Scenario("disk-full", "JetStream's store filled to its max_file_store mid-run, freed after "
             "25-30 s", fill_store, stack=small_store_stack),
    Scenario("two-servers-kill", "two servers, kill -9 of one", kill_one_of_two_servers, servers=2),
    Scenario("two-servers-kill-for-good", "two servers, kill -9 of one, never restarted",
             kill_one_of_two_servers_for_good, servers=2),
    Scenario("long-running", "beside the workload, on a stack with a 2 s retention: a 7 s timer "
             "and an 8 s signal wait through kill -9 of server and worker, then purged",
             long_running),
    Scenario("trigger-firing", "beside the workload, on a stack of its own: a schedule firing "
             "every second and a subject trigger through kill -9 of the server three times; "
             "every fire time and message starts exactly one execution", trigger_firing),
    Scenario("clock-skew", "the server an hour behind, then restarted an hour ahead; step "
             "timeouts fire on time", skew_clock, stack=skewed_stack, unavailable=_faketime_missing),
)

BY_NAME = {s.name: s for s in SCENARIOS}
