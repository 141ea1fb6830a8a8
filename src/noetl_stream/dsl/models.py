"""The canonical IR every authoring form normalizes to (ARCHITECTURE §8).

Frozen pydantic models: the router and worker read only these, never raw YAML. Template strings
are kept as written and rendered at run time; `line` fields point back at the source for errors.
"""

from __future__ import annotations

from functools import cached_property
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from noetl_stream.dsl import executor_block
from noetl_stream.dsl.keychain import KeychainEntry
from noetl_stream.jsonutil import JsonObject

Template = JsonValue  # a value that may hold "{{ ... }}" strings at any depth

Directive = Literal["continue", "retry", "jump", "break", "fail"]
Backoff = Literal["fixed", "linear", "exponential", "none"]
RetryScope = Literal["tool", "chain"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TimerSpec(_Frozen):
    """A durable timer a listener sets: `timer.fired` with `data.timer_id == name` later."""

    name: str = Field(description="Timer id, a subject token; setting it again resets it.")
    after_s: float = Field(ge=0, description="Seconds from when the rule fires.")


class Rule(_Frozen):
    """One task policy rule: the first rule whose `when` is true decides what happens next."""

    when: str | None = Field(None, description="Guard template; None marks the `else` rule.")
    do: Directive = Field("continue", description="What the pipeline does after this outcome.")
    attempts: int = Field(3, ge=1, description="Attempts in all, the first included (retry).")
    backoff: Backoff = Field("fixed", description="How the wait grows between attempts.")
    delay: float = Field(0.0, ge=0, description="Seconds before the second attempt.")
    max_delay: float | None = Field(None, ge=0, description="Cap on one wait, seconds.")
    to: str | None = Field(None, description="Task to jump to (`do: jump`).")
    set_ctx: dict[str, Template] = Field(default_factory=dict, description="Execution ctx patch.")
    set_iter: dict[str, Template] = Field(default_factory=dict, description="Iteration-local writes.")
    set_locals: dict[str, Template] = Field(default_factory=dict, description="Pipeline-local names.")
    multiplier: float | None = Field(
        None, gt=0, description="Growth factor of exponential backoff; None doubles each wait.")
    event: str | None = Field(
        None, description="Case dialect: the name the guard reads as `event.name`: `call.done` "
        "(after every call), `call.error` (only after a failed one), `step.enter`, `step.exit`; "
        "None for canonical rules.")
    call: dict[str, Template] = Field(
        default_factory=dict, description="Case `call`: config overrides rendered when the rule "
        "fires and merged (deeply) over the task's rendered config from its next call on.")
    result: Template | None = Field(
        None, description="Case `result`: rendered after the rule's writes, it replaces the "
        "task's result (so the step's, when the task is the last one). None keeps the result.")
    route: str | None = Field(
        None, description="Case `next`: the route the step's outcome carries when this rule "
        "fires; only the step's arcs with this `route` fire then.")
    priority: int = Field(
        0, description="Spec 001 `next.priority` (next_policy `defer`): when a pipeline reaches "
        "several routes, the one with the highest priority wins; the first reached among equals.")
    case_matched: Template | None = Field(
        None, description="Spec 001 case: the branches found true when this rule fires (a list "
        "of branch names, or a template giving one); the outcome reports them as `case_matched` "
        "and the router publishes `case.evaluated`.")
    scope: RetryScope | None = Field(
        None, description="Retry clause: `tool` retries the task itself, `chain` re-runs the "
        "pipeline from its first task (attempts counted per chain). A rule with a scope reads "
        "the retry context in its guard (`attempt`, `max_attempts`, `status_code`, `error`, "
        "`success`, `result`, `data`); None for plain canonical rules (tool scope).")
    jitter: bool = Field(
        False, description="Spread each wait over [wait/2, wait], fixed per idempotency key "
        "and attempt, so a replay waits the same.")

    def backoff_wait(self, attempt: int) -> float:
        """The wait before attempt `attempt + 1`, before jitter and the `max_delay` cap: the one
        formula both the pipeline (that waits) and the router's watchdog (that budgets) use.
        """
        if self.backoff == "exponential":
            return self.delay * ((self.multiplier or 2.0) ** (attempt - 1))
        if self.backoff == "linear":
            return self.delay * attempt
        if self.backoff == "none":
            return 0.0
        return self.delay
    timer: TimerSpec | None = Field(
        None, description="Listener `timer`: set (or reset) a durable timer that publishes "
        "`timer.fired` to this execution after `after_s` seconds.")
    sink: tuple[Task, ...] = Field(
        default=(), description="Case `sink`: storage tasks run in order when the rule fires, "
        "after its writes and before its directive, reading the call's result as `result` / "
        "`data` and its envelope as `this`; they leave the task's result as it is.")
    line: int | None = None


class PollSpec(_Frozen):
    """`poll:`: re-run a task that succeeded until `until` is true (spec 001 §4.3)."""

    until: str = Field(description="Guard read after each successful call; true ends polling.")
    interval: float = Field(0.0, ge=0, description="Seconds between calls.")
    max_attempts: int | None = Field(
        None, ge=1, description="Calls in all, the first included; None for no bound.")
    deadline: float | None = Field(
        None, gt=0, description="Seconds from the first call after which polling gives up.")
    line: int | None = None


class SinkSpec(_Frozen):
    """What makes a task a sink (spec 004 §10): it stores a result and does not replace it."""

    when: str | None = Field(None, description="Guard; when false the sink is skipped.")
    source: str = Field(description="Where it was written: `sink`, `sink[<i>]` or "
                        "`case[<i>].then.sink`.")


class Task(_Frozen):
    """One tool invocation in a step's pipeline."""

    name: str
    kind: str
    config: dict[str, Template] = Field(default_factory=dict, description="Kind-specific fields.")
    input: dict[str, Template] = Field(default_factory=dict, description="Inputs (`input`/`args`).")
    rules: tuple[Rule, ...] = Field(default=(), description="spec.policy.rules, in order.")
    has_policy: bool = Field(False, description="True when the task declared spec.policy.rules.")
    set_ctx: dict[str, Template] = Field(default_factory=dict)
    set_iter: dict[str, Template] = Field(default_factory=dict)
    set_locals: dict[str, Template] = Field(default_factory=dict)
    spec: JsonObject = Field(
        default_factory=dict, description="Runtime knobs (timeout, transaction, idempotent, ...), "
        "effective once parsed: kind defaults <- executor.spec <- step.spec <- loop.spec <- the "
        "task's own spec, without `policy` (spec 002 §3, dsl/layering.py).")
    poll: PollSpec | None = Field(
        None, description="Re-run the task until a guard holds; failures are the rules' business.")
    sink: SinkSpec | None = Field(
        None, description="A storage task compiled from `sink`: its templates read the data to "
        "store as `result` / `data` (the pipeline's result so far) and `this` (the last call's "
        "envelope); the pipeline's result stays what it was, and the worker publishes "
        "`sink.started` / `sink.processed` around the call.")
    line: int | None = None


class Arc(_Frozen):
    """A transition from a finished step run to the next step."""

    step: str
    when: str | None = Field(None, description="Guard; without one the arc fires on success only.")
    args: dict[str, Template] = Field(default_factory=dict, description="Token inscription.")
    set_ctx: dict[str, Template] = Field(default_factory=dict, description="ctx writes on firing.")
    route: str | None = Field(
        None, description="Case `then.next`: the arc fires exactly when the step's outcome "
        "carries this route (set by a case rule); arcs without a route fire only when it "
        "carries none.")
    delay: float | None = Field(
        None, ge=0, description="Spec 001 `next.spec.delay`: seconds the token waits, as a "
        "durable timer, before it reaches the step; None delivers it at once.")
    line: int | None = None


class NextSpec(_Frozen):
    mode: Literal["exclusive", "inclusive"] = "exclusive"
    arcs: tuple[Arc, ...] = ()


class AdmitRule(_Frozen):
    when: str | None = None
    allow: bool = True


class CursorSpec(_Frozen):
    """`loop.cursor`: where a cursor loop claims its work, one item per iteration."""

    kind: str = Field("postgres", description="Tool kind that runs the claim; it must be able to "
                      "claim (postgres).")
    claim: str = Field(description="Template of the SQL that claims one item and returns it (for "
                       "example `UPDATE ... WHERE id IN (SELECT ... FOR UPDATE SKIP LOCKED LIMIT "
                       "1) RETURNING ...`); no row means nothing is left.")
    auth: Template | None = Field(None, description="Credential name, as in the kind's tasks.")
    connection: Template | None = Field(None, description="Inline connection, as in the kind's "
                                        "tasks.")
    options: JsonObject = Field(default_factory=dict, description="`options` as written "
                                    "(NoETL driver tuning); not read by this build.")
    line: int | None = None


class LoopSpec(_Frozen):
    collection: Template = Field(None, description="Template or literal list to iterate over; "
                                 "None for a cursor loop.")
    iterator: str = Field(description="Name of the current element in `iter`.")
    mode: Literal["sequential", "parallel", "cursor"] = "sequential"
    max_in_flight: int | str | None = Field(
        None, description="Iterations (cursor: claiming slots) in flight at once: a positive "
        "whole number, or a template rendered when the loop starts.")
    cursor: CursorSpec | None = Field(
        None, description="`loop.cursor` (mode cursor): iterations claim their items from a "
        "database until a claim returns none, instead of iterating `in`.")
    spec: JsonObject = Field(
        default_factory=dict, description="`loop.spec` as written; its knobs other than `policy`, "
        "`mode`, `max_in_flight` and `exec` reach the step's tasks (spec 002 §3).")
    line: int | None = None


class CaseBranch(_Frozen):
    """One spec 001 case branch as the router sees it, for its audit events."""

    name: str = Field(description="`case_<index>` by source position; `else` for the else branch.")
    route: str | None = Field(None, description="The route its `next` gives the step, if any.")
    policy: Literal["end_step", "break_chain", "defer"] = Field(
        "end_step", description="The `next_policy` in force when this branch's `next` wins.")
    priority: int = Field(0, description="`priority`, used when `branch_order: priority`.")
    line: int | None = None


class CaseSpec(_Frozen):
    """Spec 001 case settings kept for the router's `case.evaluated` / `next.evaluated` /
    `case.branch.suppressed` events; the behaviour itself is compiled into task rules and arcs.
    """

    mode: Literal["exclusive", "inclusive"] = Field(
        "exclusive", description="`case_mode`: first true branch, or every true branch in order.")
    branch_order: Literal["source", "priority"] = Field(
        "source", description="`branch_order`: YAML order, or highest `priority` first.")
    next_policy: Literal["end_step", "break_chain", "defer"] = Field(
        "end_step", description="`next_policy`: the step default for what a `next` ends.")
    branches: tuple[CaseBranch, ...] = Field(
        default=(), description="The branches in execution order.")


class Step(_Frozen):
    name: str
    desc: str | None = None
    line: int | None = None
    args: dict[str, Template] = Field(default_factory=dict, description="Step inputs (`input`/`args`).")
    admit: tuple[AdmitRule, ...] = ()
    loop: LoopSpec | None = None
    tasks: tuple[Task, ...] = ()
    set_ctx: dict[str, Template] = Field(default_factory=dict, description="Step `set:` after success.")
    vars: dict[str, Template] = Field(default_factory=dict, description="`vars:` extracted on success.")
    next: NextSpec = Field(default_factory=NextSpec)
    enter: tuple[Rule, ...] = Field(
        default=(), description="Rules the router evaluates when the step starts, before its "
        "first command (case `step.enter`): the first true one applies its ctx writes, or "
        "fails the step with `do: fail`.")
    exit: tuple[Rule, ...] = Field(
        default=(), description="Rules the router evaluates when the step has succeeded, before "
        "its arcs (case `step.exit`): the first true one applies its ctx writes, `result`, "
        "`route`, or fails the step with `do: fail`.")
    eval_mode: Literal["on_entry", "on_event"] = Field(
        "on_entry", description="`on_event`: the step runs no tool; it stays active and "
        "evaluates `listen` on step.enter and on every later event of its execution.")
    listen: tuple[Rule, ...] = Field(
        default=(), description="Rules of an `on_event` step, tried in order on each event: the "
        "first true one writes ctx, sets a timer, and leaves (with its `route`) or fails.")
    spec: JsonObject = Field(default_factory=dict)
    pool: str | None = None
    case: CaseSpec | None = Field(
        None, description="Spec 001 case settings (case_mode, branch_order, next_policy, "
        "branches) for the router's audit events; None for other forms.")


class Playbook(_Frozen):
    api_version: str = "noetl.io/v2"
    kind: str = "Playbook"
    name: str
    path: str | None = None
    version: str | None = None
    description: str | None = None
    workload: JsonObject = Field(default_factory=dict)
    steps: tuple[Step, ...]
    executor: JsonObject = Field(default_factory=dict)
    keychain: tuple[KeychainEntry, ...] = Field(
        default=(), description="`keychain:` declarations, resolved by the worker (spec 002 §2.1).")
    file: str = "<string>"

    def step(self, name: str) -> Step:
        return self.step_index[name]

    @cached_property
    def step_index(self) -> dict[str, Step]:
        """Steps by name, built once per playbook: the router looks steps up on every event."""
        return {s.name: s for s in self.steps}

    @property
    def start_step(self) -> Step:
        """`executor.spec.entry_step` when given (NoETL's runtimes), else `start`, else the first."""
        entry = executor_block.entry_step(self.executor)
        for s in self.steps:
            if s.name == entry:
                return s
        for s in self.steps:
            if s.name == "start":
                return s
        return self.steps[0]
