"""Fault-injection harness: real nats-server, `noetl-stream server` and `worker` subprocesses, the
ledger HTTP service, a mixed workload, and the checks of ARCHITECTURE §6.5 turned into numbers.

One scenario = a fresh NATS store, a fresh stack, N executions submitted over a second or two, one
fault coroutine running beside them, then the checks:

- completed: executions whose stream holds `execution.completed`
- identical results: final `status`, `result`, `steps`, `ctx` equal the fault-free reference run
  (execution ids replaced by a placeholder, timings dropped)
- duplicate completions: a step run or loop iteration with two `step.done` /
  `loop.iteration.done` in the stream, a step run started twice, or two `execution.completed`
  (messages the harness injected on purpose are not counted)
- duplicate side effects: a logical call of the ledger applied under more than one key
- stuck: executions with no terminal event at the scenario deadline
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nats
from ledger import Ledger
from nats.aio.client import Client
from nats.errors import Error as NatsError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext
from nats.js.api import DeliverPolicy
from verifying import verify_planned

from noetl_stream import jsonutil
from noetl_stream.bus.nats_server import NatsServer, start_nats_server
from noetl_stream.dsl.composition import PlaybookFile, load_with_children
from noetl_stream.messages import ExecutionRequest, split_outcome_pool
from noetl_stream.state.catalog import register_files
from noetl_stream.state.results import ResultStore

CLI = Path(sys.executable).with_name("noetl-stream")
PLAYBOOKS = Path(__file__).with_name("playbooks")
EVENTS = "NOETL_EVENTS"
INJECTED = "Chaos-Injected"  # header on messages the harness publishes as faults
END_TYPES = ("execution.completed", "execution.failed", "execution.cancelled", "execution.rejected")
# Keys whose values differ between two correct runs (clock readings, HTTP response headers).
VOLATILE = frozenset({"timestamp", "duration_ms", "started_at", "finished_at", "updated_at",
                      "headers", "elapsed_s", "created_at", "date", "Date"})
# The mixed workload: execution i runs KINDS[i % len(KINDS)].
KINDS = ("chain", "flaky", "fanout", "join", "sub_parent", "heartbeat", "flaky", "big")


@dataclass(frozen=True)
class Knobs:
    """Timing of the spawned processes: short leases so redelivery happens in seconds."""

    lease_s: float = 3.0
    max_deliver: int = 20
    server_ack_wait_s: float = 4.0
    python_processes: int = 2

    def env(self, home: Path, urls: list[str]) -> dict[str, str]:
        return {**os.environ,
                "NOETL_STREAM_HOME": str(home),
                "NOETL_STREAM_NATS_URL": ",".join(urls),
                "NOETL_STREAM_COMMAND_ACK_WAIT_S": f"{self.lease_s:g}",
                "NOETL_STREAM_COMMAND_MAX_DELIVER": str(self.max_deliver),
                "NOETL_STREAM_ROUTER_ACK_WAIT_S": f"{self.server_ack_wait_s:g}"}


@dataclass
class Service:
    """One `noetl-stream server|worker` process, restarted in place when it dies."""

    role: str
    index: int
    proc: asyncio.subprocess.Process | None = None
    starts: int = 0
    down_on_purpose: bool = False

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.proc.returncode is None else None


class Stack:
    """NATS (single node, or a cluster set by the scenario) plus server and worker processes."""

    def __init__(self, folder: Path, knobs: Knobs, *, servers: int, workers: int) -> None:
        self.folder = folder
        self.knobs = knobs
        self.home = folder / "home"
        self.home.mkdir(parents=True, exist_ok=True)
        self.nats: NatsServer | None = None
        self.nats_port: int | None = None
        self.urls: list[str] = []
        self.services = [Service("server", i) for i in range(servers)] + \
                        [Service("worker", i) for i in range(workers)]
        self.unexpected_exits: list[str] = []
        self.extra_env: dict[str, str] = {}
        self._supervisor: asyncio.Task[None] | None = None

    # -- NATS --------------------------------------------------------------------------------
    async def start_nats(self) -> None:
        self.nats = await start_nats_server(self.folder / "nats", port=self.nats_port, record=False)
        self.nats_port = self.nats.port
        self.urls = [self.nats.url]

    def kill_nats(self) -> None:
        if self.nats is not None and self.nats.process is not None:
            self.nats.process.kill()
            self.nats.process.wait()

    # -- services ----------------------------------------------------------------------------
    def of(self, role: str) -> list[Service]:
        return [s for s in self.services if s.role == role]

    def worker_pids(self) -> list[int]:
        return [pid for s in self.of("worker") if (pid := s.pid) is not None]

    async def spawn(self, svc: Service) -> None:
        svc.starts += 1
        extra = ["--python-processes", str(self.knobs.python_processes), "--concurrency", "16"] \
            if svc.role == "worker" else []
        log = open(self.folder / f"{svc.role}{svc.index}-{svc.starts}.log", "wb")  # noqa: SIM115
        svc.proc = await asyncio.create_subprocess_exec(
            str(CLI), svc.role, *extra, stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=log,
            env={**self.knobs.env(self.home, self.urls), **self.extra_env}, start_new_session=True)
        log.close()
        svc.down_on_purpose = False

    async def start(self) -> None:
        for svc in self.services:
            await self.spawn(svc)
        self._supervisor = asyncio.create_task(self._supervise())

    def signal(self, svc: Service, sig: signal.Signals) -> int | None:
        """Send `sig` to the service's process (not its children: a real kill -9 leaves them)."""
        pid = svc.pid
        if pid is None:
            return None
        if sig == signal.SIGKILL:
            svc.down_on_purpose = True
        os.kill(pid, sig)
        return pid

    async def kill(self, svc: Service) -> None:
        self.signal(svc, signal.SIGKILL)
        if svc.proc is not None:
            await svc.proc.wait()

    async def restart(self, svc: Service) -> None:
        if svc.proc is not None and svc.proc.returncode is None:
            return
        await self.spawn(svc)

    def service_of_pid(self, pid: int) -> Service | None:
        """The service whose process is `pid` or an ancestor of it (a python child of a worker)."""
        seen = 0
        while pid > 1 and seen < 8:
            for svc in self.services:
                if svc.pid == pid:
                    return svc
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
            except OSError:
                return None
            pid = int(stat.rsplit(")", 1)[1].split()[1])
            seen += 1
        return None

    async def _supervise(self) -> None:
        # What systemd or Kubernetes would do: a process that exits by itself is started again.
        # The harness counts these, since a process of ours should ride out the faults instead.
        while True:
            await asyncio.sleep(0.25)
            for svc in self.services:
                if svc.proc is not None and svc.proc.returncode is not None \
                        and not svc.down_on_purpose:
                    self.unexpected_exits.append(f"{svc.role}{svc.index} exit {svc.proc.returncode}")
                    await self.spawn(svc)

    async def stop(self) -> None:
        if self._supervisor is not None:
            self._supervisor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._supervisor
        for svc in self.services:
            if svc.proc is None:
                continue
            # The whole session: the service and its warm python interpreters, stopped or not.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(svc.proc.pid, signal.SIGCONT)
                os.killpg(svc.proc.pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                await svc.proc.wait()
        if self.nats is not None:
            await self.nats.stop()


# -- workload -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Planned:
    index: int
    kind: str
    execution_id: str
    payload: dict[str, Any]


def plan(tag: str, n: int, ledger_url: str, knobs: Knobs) -> list[Planned]:
    out = []
    for i in range(n):
        kind = KINDS[i % len(KINDS)]
        payload: dict[str, Any] = {"n": i + 1}
        if kind in ("flaky", "heartbeat"):
            payload["ledger"] = ledger_url
        if kind == "heartbeat":
            payload["sleep_s"] = round(knobs.lease_s * 1.5, 2)  # longer than the lease itself
        out.append(Planned(i, kind, f"{tag}{i:03d}", payload))
    return out


def load_kinds() -> dict[str, list[PlaybookFile]]:
    return {kind: load_with_children(PLAYBOOKS / f"{kind}.yaml").files for kind in set(KINDS)}


# -- NATS client helpers --------------------------------------------------------------------
@dataclass
class Client_:
    nc: Client
    js: JetStreamContext


async def connect_client(urls: list[str]) -> Client_:
    async def quiet(exc: Exception) -> None:  # reconnect noise during NATS faults is expected
        del exc

    nc = await nats.connect(servers=urls, name="chaos-harness", max_reconnect_attempts=-1,
                            reconnect_time_wait=0.2, connect_timeout=3, error_cb=quiet)
    return Client_(nc, nc.jetstream(timeout=5))


async def retrying(op: Callable[[], Awaitable[Any]], *, deadline: float, what: str) -> Any:
    """Run `op` until it succeeds: the harness's own calls must survive NATS faults too."""
    while True:
        try:
            return await op()
        except (NatsError, NatsTimeoutError, TimeoutError, OSError) as exc:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what}: {exc!r}") from exc
            await asyncio.sleep(0.2)


@dataclass(frozen=True)
class Stored:
    subject: str
    data: bytes
    headers: dict[str, str]


async def read_stream(js: JetStreamContext, subject: str, timeout_s: float = 5.0) -> list[Stored]:
    """Every message the event stream holds on `subject`, with headers, oldest first."""
    info = await js.stream_info(EVENTS, subjects_filter=subject)
    expected = sum((info.state.subjects or {}).values())
    out: list[Stored] = []
    if not expected:
        return out
    sub = await js.subscribe(subject, stream=EVENTS, ordered_consumer=True,
                             deliver_policy=DeliverPolicy.ALL)
    try:
        while len(out) < expected:
            try:
                msg = await sub.next_msg(timeout=timeout_s)
            except NatsTimeoutError:
                break
            out.append(Stored(msg.subject, msg.data, dict(msg.headers or {})))
    finally:
        await sub.unsubscribe()
    return out


async def subject_counts(js: JetStreamContext, subject: str) -> dict[str, int]:
    info = await js.stream_info(EVENTS, subjects_filter=subject)
    return dict(info.state.subjects or {})


# -- a scenario's run -----------------------------------------------------------------------
@dataclass
class Run:
    """What a fault coroutine can see and touch."""

    name: str
    stack: Stack
    ledger: Ledger
    client: Client_
    rng: random.Random
    planned: list[Planned]
    knobs: Knobs
    reference_wall_s: float
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # checks of the scenario's own that failed
    terminal: dict[str, str] = field(default_factory=dict)  # execution id -> end event type

    def moment(self, low: float = 0.1, high: float = 0.7) -> float:
        """A random moment inside the run, as seconds after the first submission."""
        return self.rng.uniform(low, high) * max(self.reference_wall_s, 2.0)

    def running(self) -> list[Planned]:
        return [p for p in self.planned if p.execution_id not in self.terminal]


Fault = Callable[[Run], Awaitable[None]]


@dataclass
class Row:
    scenario: str
    executions: int = 0
    completed: int = 0
    identical: int = 0
    duplicate_completions: int = 0
    duplicate_effects: int = 0
    stuck: int = 0
    wall_s: float = 0.0
    notes: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    not_run: str | None = None

    @property
    def ok(self) -> bool:
        if self.not_run is not None:
            return True
        return (not self.failed and self.completed == self.executions
                and self.identical == self.executions and self.duplicate_completions == 0
                and self.duplicate_effects == 0 and self.stuck == 0)


def normalise(final: dict[str, Any], execution_id: str) -> Any:
    """The parts of a final event two correct runs agree on, with the execution id masked."""
    kept = {k: final.get(k) for k in ("status", "result", "steps", "ctx")}
    text = jsonutil.dumps(kept).decode().replace(execution_id, "<id>")
    return _drop_volatile(jsonutil.loads(text))


def _drop_volatile(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_volatile(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [_drop_volatile(v) for v in value]
    return value


@dataclass
class Harness:
    folder: Path
    knobs: Knobs
    ledger: Ledger
    kinds: dict[str, list[PlaybookFile]]
    reference: dict[int, Any] = field(default_factory=dict)  # index -> normalised final
    reference_wall_s: float = 0.0

    async def run(self, name: str, fault: Fault | None, *, n: int, rng: random.Random,
                  servers: int = 1, workers: int = 2, deadline_s: float = 90.0,
                  stack_factory: Callable[[Path, Knobs], Awaitable[Stack]] | None = None) -> Row:
        row = Row(name, executions=n)
        folder = self.folder / name
        folder.mkdir(parents=True, exist_ok=True)
        try:
            if stack_factory is not None:
                stack = await stack_factory(folder, self.knobs)
            else:
                stack = Stack(folder, self.knobs, servers=servers, workers=workers)
                await stack.start_nats()
        except Exception as exc:  # no NATS, no scenario: say so in its row
            row.failed.append(f"NATS did not start: {exc!r}")
            return row
        self.ledger.reset()
        self.ledger.worker_pids = stack.worker_pids
        client: Client_ | None = None
        fault_task: asyncio.Task[None] | None = None
        try:
            await stack.start()
            client = await connect_client(stack.urls)
            tag = "".join(c for c in name if c.isalnum())[:16]
            planned = plan(tag, n, self.ledger.url, self.knobs)
            run = Run(name, stack, self.ledger, client, rng, planned, self.knobs,
                      self.reference_wall_s or 10.0)
            await self._register(client, time.monotonic() + 30)
            t0 = time.monotonic()
            end_by = t0 + deadline_s
            submitting = asyncio.create_task(self._submit(client, planned, rng, end_by))
            if fault is not None:
                fault_task = asyncio.create_task(fault(run))
            await self._wait_terminal(run, end_by)
            row.wall_s = time.monotonic() - t0
            await submitting
            if fault_task is not None:
                # A fault that also acts after the end (late duplicates) finishes its work here.
                try:
                    await asyncio.wait_for(asyncio.shield(fault_task), 30)
                except TimeoutError:
                    fault_task.cancel()
                    row.failed.append("fault did not finish")
                with contextlib.suppress(asyncio.CancelledError):
                    await fault_task
            await self._check(run, row)
            row.notes += run.notes
            row.failed += run.problems
            if stack.unexpected_exits:
                row.notes.append("supervisor restarted: " + ", ".join(stack.unexpected_exits))
        except Exception as exc:
            # One broken scenario must still leave a row in the table and the next one running.
            row.failed.append(f"harness error: {exc!r}")
        finally:
            if fault_task is not None and not fault_task.done():
                fault_task.cancel()
                with contextlib.suppress(BaseException):
                    await fault_task
            if client is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(client.nc.close(), 5)
            await stack.stop()
        return row

    async def _register(self, client: Client_, deadline: float) -> None:
        # The server provisions at start-up; until it has, the catalog bucket is missing.
        for files in self.kinds.values():
            await retrying(lambda files=files: register_files(client.js, files), deadline=deadline,
                           what="register playbooks")

    async def _submit(self, client: Client_, planned: list[Planned], rng: random.Random,
                      deadline: float) -> None:
        for p in planned:
            files = self.kinds[p.kind]
            request = ExecutionRequest(execution_id=p.execution_id, playbook=files[0].text,
                                       playbook_file=str(PLAYBOOKS / f"{p.kind}.yaml"),
                                       payload=p.payload)
            data = request.model_dump_json().encode()
            # The same msg id on every try: a publish whose ack was lost is not stored twice.
            await retrying(lambda data=data, p=p: client.js.publish(
                "noetl.requests.execute", data, headers={"Nats-Msg-Id": f"req:{p.execution_id}"}),
                deadline=deadline, what=f"submit {p.execution_id}")
            await asyncio.sleep(rng.uniform(0.0, 0.15))

    async def _wait_terminal(self, run: Run, deadline: float) -> None:
        wanted = {p.execution_id for p in run.planned}
        while time.monotonic() < deadline:
            try:
                counts = await subject_counts(run.client.js, "noetl.events.*.execution.>")
            except (NatsError, NatsTimeoutError, TimeoutError, OSError):
                await asyncio.sleep(0.3)
                continue
            for subject in counts:
                _, _, eid, etype = subject.split(".", 3)
                if eid in wanted and etype in END_TYPES:
                    run.terminal.setdefault(eid, etype)
            if len(run.terminal) == len(wanted):
                return
            await asyncio.sleep(0.3)

    async def _check(self, run: Run, row: Row) -> None:
        js = run.client.js
        deadline = time.monotonic() + 60
        results = ResultStore(js)
        row.stuck = row.executions - len(run.terminal)
        row.completed = sum(1 for t in run.terminal.values() if t == "execution.completed")
        failed = [eid for eid, t in run.terminal.items() if t != "execution.completed"]
        if failed:
            row.notes.append(f"not completed: {', '.join(sorted(failed)[:4])}")
        finals: dict[int, Any] = {}
        for p in run.planned:
            etype = run.terminal.get(p.execution_id)
            if etype is None:
                continue
            subject = f"noetl.events.{p.execution_id}.{etype}"
            msg = await retrying(lambda s=subject: js.get_last_msg(EVENTS, s), deadline=deadline,
                                 what="read final event")
            final = await results.resolve(jsonutil.loads(msg.data))
            finals[p.index] = normalise(final, p.execution_id)
        # Kept beside the logs, so a difference can be read with diff.
        (run.stack.folder / "finals.json").write_bytes(jsonutil.dumps(finals))
        if not self.reference:
            self.reference = finals
        row.identical = sum(1 for i, f in finals.items() if self.reference.get(i) == f)
        differing = [run.planned[i].execution_id for i, f in finals.items()
                     if self.reference.get(i) != f]
        if differing:
            row.notes.append(f"results differ: {', '.join(differing[:4])}")

        ours = tuple(p.execution_id for p in run.planned)
        row.duplicate_completions, detail = await count_duplicate_completions(js, ours, deadline)
        if detail:
            row.notes.append("duplicates: " + "; ".join(detail[:4]))
        self._check_ledger(run, row)
        await verify_planned(run, row)

    def _check_ledger(self, run: Run, row: Row) -> None:
        ledger = run.ledger
        row.duplicate_effects = ledger.duplicate_effects()
        expected = set()
        for p in run.planned:
            if p.kind == "flaky" and run.terminal.get(p.execution_id) == "execution.completed":
                expected |= {f"{p.execution_id}:charge:{c}" for c in range(3)}
                expected.add(f"{p.execution_id}:confirm")
        missing = expected - set(ledger.applied)
        if missing:
            row.failed.append(f"side effects never applied: {sorted(missing)[:3]}")
        if ledger.missing_key:
            row.failed.append(f"{ledger.missing_key} requests without Idempotency-Key")
        repeats = ledger.raw_repeats()
        if repeats:
            row.notes.append(f"{repeats} replayed key(s)")
        reruns = sum(n - 1 for n in ledger.beats.values() if n > 1)
        if reruns:
            row.notes.append(f"{reruns} long task re-run(s)")


async def count_duplicate_completions(js: JetStreamContext, ours: tuple[str, ...],
                                      deadline: float) -> tuple[int, list[str]]:
    """Outcomes, starts and ends that the stream holds more than once per run (children too)."""

    def mine(eid: str) -> bool:
        return eid.startswith(ours)

    dupes = 0
    detail: list[str] = []
    outcome_keys: Counter[tuple[str, str, Any]] = Counter()
    started: Counter[tuple[str, str, Any]] = Counter()
    for subject, counter in (("noetl.events.*.step.done.*", outcome_keys),
                             ("noetl.events.*.loop.iteration.done.*", outcome_keys),
                             ("noetl.events.*.step.started", started)):
        stored = await retrying(lambda s=subject: read_stream(js, s), deadline=deadline,
                                what=f"read {subject}")
        for m in stored:
            if INJECTED in m.headers:
                continue
            eid = m.subject.split(".")[2]
            if not mine(eid):
                continue
            try:
                event = jsonutil.loads(m.data)
            except ValueError:
                continue
            if not isinstance(event, dict):
                continue
            kind = split_outcome_pool(m.subject.split(".", 3)[3])[0]
            counter[(kind, str(event.get("step_run_id")), event.get("iteration"))] += 1
    for counter in (outcome_keys, started):
        for key, count in counter.items():
            if count > 1:
                dupes += count - 1
                detail.append(f"{key[0]} {key[1]}#{key[2]} x{count}")
    ends = await retrying(lambda: subject_counts(js, "noetl.events.*.execution.completed"),
                          deadline=deadline, what="count ends")
    for subject, count in ends.items():
        if mine(subject.split(".")[2]) and count > 1:
            dupes += count - 1
            detail.append(f"{subject} x{count}")
    return dupes, detail


# -- the table ------------------------------------------------------------------------------
COLUMNS = ("scenario", "executions", "completed", "identical results", "duplicate completions",
           "duplicate side effects", "stuck", "wall time", "verdict")


def table(rows: list[Row]) -> str:
    cells = [list(COLUMNS)]
    for r in rows:
        if r.not_run is not None:
            cells.append([r.scenario, "-", "-", "-", "-", "-", "-", "-", f"NOT RUN: {r.not_run}"])
            continue
        cells.append([r.scenario, str(r.executions), str(r.completed), str(r.identical),
                      str(r.duplicate_completions), str(r.duplicate_effects), str(r.stuck),
                      f"{r.wall_s:.1f} s", "ok" if r.ok else "FAIL"])
    widths = [max(len(row[i]) for row in cells) for i in range(len(COLUMNS))]
    lines = []
    for n, row in enumerate(cells):
        lines.append("| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |")
        if n == 0:
            lines.append("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    notes = [f"- {r.scenario}: " + "; ".join(r.failed + r.notes) for r in rows if r.failed or r.notes]
    return "\n".join(lines + (["", *notes] if notes else []))
