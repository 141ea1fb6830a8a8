"""Router state of one execution: the marking, step runs, loops, joins, the child executions
its runs wait on, and the outbox.

Plain dataclasses that round-trip through JSON (`to_json` / `from_dict`) so the snapshot in KV
`noetl_executions` is exactly what the router works on, results aside.

Results are kept out of that snapshot, so committing a step costs the same however many steps
finished before it. A step's result (and the execution's) is in memory on its record; the server
stores a large one once in KV `noetl_step_results` under a key made of its content hash
(state/step_results.py) and the record keeps only that `result_key`. A small one, while the
state's small results together stay within a budget, stays inline as the record's `result`
(the server decides, and notes its size with `keep_inline`), as does a result nobody placed yet
(a state the router made and no server has committed, or one an older version wrote); reading a
state takes either form. A loop keeps its latest iteration results inline and moves them out a
page (PAGE_SIZE iterations) at a time once every iteration of the page has ended
(`LoopState.pages`); its items, when they take more than 1 KiB of JSON, are stored there once
(`items_key`) and the state writes them as []. Step records leave the state the same way: once
PAGE_SIZE records have settled (their step is not running and their result is placed, stored or
kept inline) they are stored as a page (`step_pages`), an inline result with its record, and the
state writes only the others; a record changed after that is written inline again, and inline
records win over paged ones when a state is read. The keys of stored pages are themselves stored
ten at a time (router/page_index.py), so the keys a state names stay few however long it runs.
Names starting with `_` are never written: orjson leaves them out. A run keeps the child
executions its commands started (`Run.children`, router/children.py) only while it is in flight,
so the router can cancel them when it cuts the run short; finished runs are dropped with their
children.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Literal, NamedTuple, NotRequired, TypedDict

import orjson

from noetl_stream import jsonutil
from noetl_stream.formats import STATE, VERSION_FIELD
from noetl_stream.jsonutil import JsonValue
from noetl_stream.messages import Command
from noetl_stream.router import page_index
from noetl_stream.router.page_index import PAGE_SIZE

OutgoingKind = Literal["command", "event", "timer", "cancel"]
LoopMode = Literal["sequential", "parallel", "cursor"]
RunStatus = Literal["running", "done", "failed", "cancelled"]
StepStatus = Literal["pending", "running", "completed", "failed", "skipped", "cancelled"]
ExecutionStatus = Literal["running", "completed", "failed", "cancelled"]

SETTLED: frozenset[str] = frozenset({"completed", "failed", "skipped", "cancelled"})
Encoded = tuple[Any, bytes]  # a value and its JSON, made once


@dataclass
class Outgoing:
    """A message the router wants published: a command for a worker pool, an event, a durable
    timer, or a cancel request for a child execution (body: `CancelRequest` fields).
    """

    kind: OutgoingKind
    msg_id: str
    body: dict[str, Any] | Command  # a command's is its typed message (encoded where published)
    event_type: str = ""  # for events
    pool: str = ""  # for commands; for an outcome the server publishes in a worker's place
    tool_kind: str = ""  # for commands: subject suffix
    progress: bool = False  # informational event: published without waiting for the store

    @property
    def plain_body(self) -> dict[str, Any]:
        """The body of an event, timer or cancel request (a command's is its `Command`)."""
        if isinstance(self.body, Command):
            raise TypeError(f"{self.msg_id} is a command, not a plain body")
        return self.body


@dataclass
class LoopState:
    """A loop step's iterations (router/loops.py); a cursor loop has no items, only slots."""

    items: list[Any]
    mode: LoopMode
    max_in_flight: int  # rendered when the loop started; a cursor loop's claiming slots
    next_index: int = 0
    in_flight: list[int] = field(default_factory=list)
    results: dict[str, JsonValue] = field(default_factory=dict)  # str(index) -> result
    done: int = 0
    error: dict[str, JsonValue] | None = None
    route: str | None = None  # a case `next` chosen by an iteration: no further iterations start
    issued_at: dict[str, float] = field(default_factory=dict)  # str(index) -> command issued
    deadlines: dict[str, float] = field(default_factory=dict)  # str(index) -> watchdog deadline
    exhausted: int = 0  # cursor slots whose claim found nothing: they are not refilled
    pages: list[str] = field(default_factory=list)  # keys of stored pages of `results`, in order
    # Keys of earlier pages, folded (router/page_index.py): they come before `pages`.
    page_index: list[list[str]] = field(default_factory=list)
    # Where `items` is stored (state/step_results.py): the state then writes them as []. None:
    # written inline (few of them, or not placed yet).
    items_key: str | None = None
    _paged: dict[str, Any] = field(default_factory=dict, repr=False)  # their results, in memory
    # `items` as JSON, made once: a loop never changes its items, and a loop over n items would
    # otherwise encode all n at every commit (`ExecutionState.to_json`).
    _items_json: Encoded | None = field(default=None, repr=False, compare=False)

    def items_written(self) -> bytes:
        """`items` as JSON, encoded once (raises TypeError or ValueError, as orjson does)."""
        self._items_json = _encoded(self._items_json, self.items)
        return self._items_json[1]

    def items_stored(self, key: str) -> None:
        """`items` is stored under `key`: the state writes them as [] from now on."""
        self.items_key, self._items_json = key, None

    def items_unloaded(self) -> bool:
        """The items are stored and not in memory (a state just read)."""
        return self.items_key is not None and not self.items

    def all_results(self) -> dict[str, Any]:
        """str(index) -> result of every iteration that reported one, stored pages included."""
        return {**self._paged, **self.results} if self._paged else self.results

    def complete_page(self) -> dict[str, Any] | None:
        """The inline results of the first page not stored yet, once every iteration of it
        has ended (its results can no longer change); None while it is still filling.
        """
        end = (page_index.count(self.pages, self.page_index) + 1) * PAGE_SIZE
        if self.next_index < end or any(i < end for i in self.in_flight):
            return None
        return {k: v for k, v in self.results.items() if int(k) < end}

    def page_stored(self, key: str, page: dict[str, Any]) -> None:
        """`page` (from complete_page) is stored under `key`: it leaves the inline results."""
        self.pages.append(key)
        for index in page:
            self._paged[index] = self.results.pop(index)

    def pages_unloaded(self) -> bool:
        """Stored pages whose results are not in memory (a state just read)."""
        return page_index.any_stored(self.pages, self.page_index) and not self._paged

    def page_loaded(self, page: dict[str, Any]) -> None:
        self._paged.update(page)


@dataclass
class Run:
    """One firing of a step (a step may fire several times through back-edges)."""

    run_id: str
    step: str
    run_no: int
    args: dict[str, JsonValue]
    status: RunStatus = "running"
    loop: LoopState | None = None
    # A listener: stream sequences of the signals and timers it applied, the latest HEARD_KEPT.
    # A set, not a high-water mark: with several servers, or after a failed batch, an earlier
    # signal can arrive after a later one and must still be heard.
    heard: list[int] = field(default_factory=list)
    issued_at: float = 0.0  # when the step fired (its command, if any, went out then)
    deadline: float | None = None  # watchdog: no outcome by then fails the run (spec.timeout)
    # Child executions started by the run's commands and still waited on: command key ("-" for
    # the run's own command, else the iteration number) -> child execution ids.
    children: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class StepRecord:
    status: StepStatus = "pending"
    runs: int = 0
    error: dict[str, JsonValue] | None = None
    http: dict[str, JsonValue] | None = None
    loop: bool = False
    # Where the result is stored (state/step_results.py); None: it is written inline.
    result_key: str | None = None
    _result: Any = field(default=None, repr=False)
    _inline_bytes: int = field(default=0, repr=False)  # its JSON's size once kept inline
    # The record as to_json writes it, `"<name>":{...}`, made once: a state of many settled
    # records would otherwise encode every one of them at every commit. The state drops it
    # whenever the record may change (`ExecutionState.record`, `hold`); the values in it
    # (results, errors) are never changed in place.
    _written: bytes | None = field(default=None, repr=False, compare=False)

    @property
    def result(self) -> Any:
        return self._result

    def hold(self, value: Any, key: str | None = None) -> None:
        """Keep `value` as the result; `key` says where it is stored, None: nowhere yet."""
        self._result, self.result_key, self._inline_bytes, self._written = value, key, 0, None

    def as_written(self) -> StepRecord:
        """The record as a committed state holds it: with its result when that is inline."""
        if self.result_key is not None or self._result is None:
            return self
        return _InlineResult.of(self)

    def written(self, name: str) -> bytes:
        """`"<name>":` and `as_written` as JSON, encoded once until the record changes (raises
        TypeError or ValueError, as orjson does, for a value JSON cannot hold).
        """
        if self._written is None:
            self._written = jsonutil.dumps(name) + b":" + jsonutil.dumps(self.as_written())
        return self._written

    def keep_inline(self, size: int) -> None:
        """The result (`size` bytes of JSON) stays inline in the state instead of stored."""
        self._inline_bytes = size


@dataclass
class _InlineResult(StepRecord):
    """A record whose result is inline, as to_json writes it: the result is a field here, so
    orjson writes it after `result_key` (and a reader takes it as the record's result).
    """

    result: Any = None

    @classmethod
    def of(cls, rec: StepRecord) -> _InlineResult:
        return cls(status=rec.status, runs=rec.runs, error=rec.error, http=rec.http,
                   loop=rec.loop, result=rec.result)


@dataclass
class Join:
    """Arrivals at a step with several forward incoming arcs: pred -> delivered (True) or ruled out."""

    arrived: dict[str, bool] = field(default_factory=dict)
    args: dict[str, JsonValue] = field(default_factory=dict)


@dataclass
class Delayed:
    """A token on a delayed arc (`next.spec.delay`), delivered when its timer fires."""

    src: str
    dst: str
    args: dict[str, JsonValue]
    fire_at: float


class Admission(TypedDict):
    """An execution under a concurrency limit (router/admission.py): its group, the limit and
    what happens at it, and where it stands.
    """

    group: str  # the playbook, with the rendered key in brackets if any
    key: str
    limit: int
    on_limit: str
    waiting: bool  # still in line for a slot
    admitted_at: NotRequired[float]
    released: NotRequired[bool]  # `concurrency.released` was emitted


@dataclass
class ExecutionState:
    execution_id: str
    playbook_key: str
    workload: dict[str, JsonValue]
    playbook_path: str | None = None  # metadata.path, for listing executions by playbook
    playbook_name: str | None = None
    # The file the request named the playbook by, named in its errors (router/failures.py).
    playbook_file: str | None = None
    status: ExecutionStatus = "running"
    ctx: dict[str, JsonValue] = field(default_factory=dict)
    vars: dict[str, JsonValue] = field(default_factory=dict)
    steps: dict[str, StepRecord] = field(default_factory=dict)
    runs: dict[str, Run] = field(default_factory=dict)
    joins: dict[str, Join] = field(default_factory=dict)
    delayed: dict[str, Delayed] = field(default_factory=dict)  # timer id -> token
    delays_set: int = 0  # delayed tokens so far: numbers their timer ids
    watchdogs_set: int = 0  # watchdog timers so far: numbers their timer ids
    # Listeners' timers not fired yet: run id -> timer name -> fire_at. The servers' stall check
    # (server/stalls.py) fails a listener whose timer is overdue and whose schedule is gone.
    timers: dict[str, dict[str, float]] = field(default_factory=dict)
    result_key: str | None = None  # where the execution's result is stored, like a step's
    step_pages: list[str] = field(default_factory=list)  # keys of stored pages of step records
    step_page_index: list[list[str]] = field(default_factory=list)  # earlier ones, folded
    error: dict[str, JsonValue] | None = None
    parent_execution_id: str | None = None
    parent_iter: dict[str, JsonValue] | None = None  # the parent's iteration, read as `iter.parent`
    started_at: float = 0.0
    ended_at: float | None = None  # the time of the event that ended it
    trace: dict[str, str] | None = None  # root span ids when traced (observe/tracing.py)
    outbox: list[Outgoing] = field(default_factory=list)
    applied: int = 0  # events applied, for progress and diagnostics
    # The format this state is written in (formats.py); a state read keeps the version it was
    # written in when that is newer than this release's, so the server can refuse to rewrite it.
    schema_version: int = STATE.current
    restarts: int = 0  # restarts applied (router/restart.py): numbers their events
    labels: dict[str, str] = field(default_factory=dict)  # the request's, for finding it in lists
    replay_of: str | None = None  # the execution this one replays (router/replay.py)
    replays: list[str] = field(default_factory=list)  # executions replayed from this one
    # Under a concurrency limit (router/admission.py): group, key, limit, on_limit, and whether
    # it still waits for a slot; None when no limit applies.
    admission: Admission | None = None
    sla_missed: bool = False  # `sla.missed` was emitted (router/deadlines.py)
    # Set by the server, not the router, to skip copies made again (server/source_copies.py):
    # the highest NOETL_EVENTS sequence applied with the NOETL_ROUTER sequence of its copy, and
    # the NOETL_EVENTS sequences of the latest events applied.
    source_mark: list[int] = field(default_factory=list)
    source_recent: list[int] = field(default_factory=list)
    _result: Any = field(default=None, repr=False)
    _inline_bytes: int = field(default=0, repr=False)  # as a step record's
    # Holders (step records, this state) whose result changed and is not placed yet.
    _fresh: list[StepRecord | ExecutionState] = field(default_factory=list, repr=False)
    # Names of the records the state writes inline: all but those in a stored page and unchanged
    # since (`record` is the only way the router changes one). None: every record.
    _inline: dict[str, None] | None = field(default=None, repr=False)
    _pages_loaded: bool = field(default=False, repr=False)

    @property
    def result(self) -> Any:
        return self._result

    def hold(self, value: Any, key: str | None = None) -> None:
        self._result, self.result_key, self._inline_bytes = value, key, 0

    def keep_inline(self, size: int) -> None:
        self._inline_bytes = size

    def set_result(self, holder: StepRecord | ExecutionState, value: Any) -> None:
        """A new result for a step record, or for the execution (holder = the state itself);
        the next commit stores it or keeps it inline.
        """
        holder.hold(value)
        if value is not None:
            self._fresh.append(holder)

    def unstored(self) -> list[StepRecord | ExecutionState]:
        """Holders whose result is not placed yet (each once); the caller stores each one or
        keeps it inline.
        """
        out: list[StepRecord | ExecutionState] = []
        for holder in self._fresh:
            if holder.result_key is None and holder.result is not None and \
                    all(h is not holder for h in out):
                out.append(holder)
        self._fresh = []
        return out

    def loops_without_items(self) -> list[LoopState]:
        """Loops whose stored items are not in memory (a state just read)."""
        return [run.loop for run in self.runs.values()
                if run.loop is not None and run.loop.items_unloaded()]

    def unloaded_loops(self) -> list[LoopState]:
        """Loops in flight whose stored pages are not in memory (a state just read)."""
        return [run.loop for run in self.runs.values()
                if run.loop is not None and run.loop.pages_unloaded()]

    def inline_result_bytes(self) -> int:
        """Bytes of the results kept inline in what the state writes (records in a stored page
        aside).
        """
        own = self._inline_bytes if self.result_key is None else 0
        return own + sum(rec._inline_bytes for rec in self.written_records().values()
                         if rec.result_key is None)

    def written_records(self) -> dict[str, StepRecord]:
        """The records a commit writes: all of them, or those not in a stored page."""
        every = self.steps
        return every if self._inline is None else {name: every[name] for name in self._inline}

    def unloaded(self) -> list[StepRecord | ExecutionState]:
        """Holders whose result is stored but not in memory (a state just read)."""
        holders: list[StepRecord | ExecutionState] = [self, *self.steps.values()]
        return [h for h in holders if h.result_key is not None and h.result is None]

    @property
    def active_runs(self) -> list[Run]:
        return [r for r in self.runs.values() if r.status == "running"]

    def record(self, step: str) -> StepRecord:
        """The step's record, to change: it is written inline again at the next commit."""
        rec = self.steps.get(step)
        if rec is None:
            rec = self.steps[step] = StepRecord()
        if self._inline is not None:
            self._inline[step] = None
        rec._written = None
        return rec

    # -- step records a page at a time (state/step_results.py stores them) ----------------
    def complete_record_page(self) -> dict[str, dict[str, Any]] | None:
        """PAGE_SIZE settled inline records as plain values, oldest first; None while fewer
        have settled. A record settles when its step is not running and its result is placed
        (stored, or kept inline: the page then holds it).
        """
        if len(self.steps) < PAGE_SIZE:
            return None
        inline = self._inline if self._inline is not None else dict.fromkeys(self.steps)
        if len(inline) < PAGE_SIZE:
            return None
        page: dict[str, dict[str, Any]] = {}
        unplaced = {id(holder) for holder in self._fresh}
        for name in inline:
            rec = self.steps[name]
            if rec.status in SETTLED and id(rec) not in unplaced:
                page[name] = _record_value(rec)
                if len(page) == PAGE_SIZE:
                    return page
        return None

    def record_page_stored(self, key: str, page: dict[str, Any]) -> None:
        """`page` (from complete_record_page) is stored under `key`: its records leave the
        state's JSON.
        """
        if self._inline is None:
            self._inline = dict.fromkeys(self.steps)
        self.step_pages.append(key)
        for name in page:
            self._inline.pop(name, None)

    def record_pages_unloaded(self) -> bool:
        """Stored record pages not in memory (a state just read)."""
        return page_index.any_stored(self.step_pages, self.step_page_index) and \
            not self._pages_loaded

    def record_pages_loaded(self, pages: list[Any]) -> None:
        """The stored pages, in order (folded ones first): their records join the inline ones,
        a later page winning over an earlier one and an inline record over both.
        """
        paged: dict[str, StepRecord] = {}
        for page in pages:
            for name, raw in (page if isinstance(page, dict) else {}).items():
                paged[name] = rec = StepRecord(**_known(StepRecord, raw))
                if rec.result_key is None and raw.get("result") is not None:
                    rec.hold(raw["result"])  # kept inline: its size counts if it is inline again
                    rec.keep_inline(len(jsonutil.dumps(raw["result"])))
        inline = self._inline if self._inline is not None else dict.fromkeys(self.steps)
        self._inline = dict(inline)
        self.steps = {**{n: r for n, r in paged.items() if n not in inline}, **self.steps}
        self._pages_loaded = True

    def summary(self) -> dict[str, Any]:
        """What `run --json` and `execution.*` events report."""
        return {
            "execution_id": self.execution_id,
            "status": self.status,
            "result": self.result,
            "error": self.error,
            "steps": {
                name: {"status": rec.status, "runs": rec.runs, "result": rec.result,
                       **({"error": rec.error} if rec.error else {})}
                for name, rec in self.steps.items()
            },
            "ctx": self.ctx,
            "vars": self.vars,
        }

    # -- JSON round trip -------------------------------------------------------------------
    def to_json(self) -> bytes:
        """The state as committed: results that are not stored are inline."""
        # orjson walks dataclasses natively and ~50x faster than dataclasses.asdict. For the
        # time of the call, `steps` is their JSON: records in a stored page are left out, and
        # each other one is written as it was at the last commit unless it changed since.
        # Each loop's items are written as encoded once (they never change), or as [] once
        # stored. (The workload is encoded afresh: a command's context may share it, and a state
        # too large to commit has that context's large values moved out in place,
        # server/state_size.py.)
        every = self.steps
        loops = [(run.loop, run.loop.items) for run in self.runs.values() if run.loop is not None]
        records = [rec.written(name) for name, rec in self.written_records().items()]
        self.steps = orjson.Fragment(b"{" + b",".join(records) + b"}")  # type: ignore[assignment]
        try:
            for loop, _ in loops:
                written = b"[]" if loop.items_key is not None else loop.items_written()
                loop.items = orjson.Fragment(written)  # type: ignore[assignment]
            data = jsonutil.dumps(self)
        finally:
            self.steps = every
            for loop, items in loops:
                loop.items = items
        if self.result_key is None and self.result is not None:
            data = data[:-1] + b',"result":' + jsonutil.dumps(self.result) + b"}"
        return data

    def to_dict(self) -> dict[str, Any]:
        result: dict[str, Any] = orjson.loads(self.to_json())
        return result

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExecutionState:
        """Read a stored state. Fields this version does not know are ignored, so a state a newer
        version wrote stays readable during a rolling upgrade (docs/deploy.md, "Upgrading");
        fields it lacks take their defaults. An older format is migrated to this release's
        first (formats.py).
        """
        data = STATE.read_newer(data)
        runs = {}
        for key, raw in data.get("runs", {}).items():
            loop = raw.get("loop")
            runs[key] = Run(**{**_known(Run, raw),
                               "loop": LoopState(**_known(LoopState, loop)) if loop else None})
        state = cls(
            execution_id=data["execution_id"],
            playbook_key=data["playbook_key"],
            workload=data.get("workload", {}),
            playbook_path=data.get("playbook_path"),
            playbook_name=data.get("playbook_name"),
            playbook_file=data.get("playbook_file"),
            status=data.get("status", "running"),
            ctx=data.get("ctx", {}),
            vars=data.get("vars", {}),
            steps={k: StepRecord(**_known(StepRecord, v)) for k, v in data.get("steps", {}).items()},
            runs=runs,
            joins={k: Join(**_known(Join, v)) for k, v in data.get("joins", {}).items()},
            delayed={k: Delayed(**_known(Delayed, v)) for k, v in data.get("delayed", {}).items()},
            delays_set=data.get("delays_set", 0),
            watchdogs_set=data.get("watchdogs_set", 0),
            timers=data.get("timers", {}),
            result_key=data.get("result_key"),
            step_pages=list(data.get("step_pages", [])),
            step_page_index=[list(keys) for keys in data.get("step_page_index", [])],
            error=data.get("error"),
            parent_execution_id=data.get("parent_execution_id"),
            parent_iter=data.get("parent_iter"),
            started_at=data.get("started_at", 0.0),
            ended_at=data.get("ended_at"),
            trace=data.get("trace"),
            outbox=[_outgoing(o) for o in data.get("outbox", [])],
            applied=data.get("applied", 0),
            schema_version=data[VERSION_FIELD],
            restarts=data.get("restarts", 0),
            labels=data.get("labels", {}),
            replay_of=data.get("replay_of"),
            replays=list(data.get("replays", [])),
            admission=data.get("admission"),
            sla_missed=data.get("sla_missed", False),
            source_mark=list(data.get("source_mark", [])),
            source_recent=list(data.get("source_recent", [])),
        )
        if page_index.any_stored(state.step_pages, state.step_page_index):
            state._inline = dict.fromkeys(state.steps)
        # A result without a key is inline (not stored yet, or written by 0.1.0).
        if state.result_key is None:
            state.set_result(state, data.get("result"))
        for name, rec in state.steps.items():
            if rec.result_key is None:
                state.set_result(rec, data["steps"][name].get("result"))
        return state


def _encoded(kept: Encoded | None, value: Any) -> Encoded:
    """`value` with its JSON: `kept` when it is of this very value, else encoded now (raises
    TypeError or ValueError, as orjson does, for a value JSON cannot hold).
    """
    if kept is not None and kept[0] is value:
        return kept
    return value, jsonutil.dumps(value)


def _record_value(rec: StepRecord) -> dict[str, Any]:
    """A record as the plain value a page holds (a copy: the record goes on changing), with its
    result when that is inline.
    """
    value = {"status": rec.status, "runs": rec.runs, "error": rec.error, "http": rec.http,
             "loop": rec.loop, "result_key": rec.result_key}
    if rec.result_key is None and rec.result is not None:
        value["result"] = rec.result
    return value


def _outgoing(raw: dict[str, Any]) -> Outgoing:
    """A stored outbox message; a command's body as the Command it was built as."""
    message = Outgoing(**_known(Outgoing, raw))
    if message.kind == "command":
        message.body = Command.model_validate(message.body)
    return message


def _known(cls: type, raw: dict[str, Any]) -> dict[str, Any]:
    """The entries of `raw` that are fields of the dataclass `cls`."""
    names = _FIELD_NAMES.get(cls)
    if names is None:
        names = _FIELD_NAMES[cls] = frozenset(f.name for f in fields(cls)
                                              if not f.name.startswith("_"))
    return {k: v for k, v in raw.items() if k in names}


_FIELD_NAMES: dict[type, frozenset[str]] = {}


class Decision(NamedTuple):
    """What applying one event decided (ARCHITECTURE §7): the new state and the messages to
    publish once it is committed. `apply` changes the state it is given rather than a copy (a
    500-item loop would otherwise copy its state 500 times), so `state` is that same object.
    """

    state: ExecutionState
    outbox: list[Outgoing]
