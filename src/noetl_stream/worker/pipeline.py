"""Run one command's task pipeline: render, call the tool, apply the task policy (spec 002 §5.4).

Directives: continue (next task), retry (same task, attempt+1, bounded by `attempts`, with backoff),
jump (to a named task), break (stop, success), fail (stop, failure). Without policy rules an ok
outcome continues and an error fails; with rules and no match, an error still fails (spec 002
says continue, but silently passing an error on is never what a playbook author means).
Rules from a `retry:` clause carry a scope: `chain` re-runs the pipeline from its first task,
and a clause that has run out hands the outcome to the rules after it. `Task.poll` re-runs a
task until its guard holds. Waits and retry.* / poll.* events: worker/retrying.py.
Sinks (`Task.sink`, `Rule.sink`) store a result without replacing it, publishing sink.started and
sink.processed; a failed sink fails the step. One handler per directive (`_on_<directive>`); polls
and sinks keep state in worker/polling.py and sinks.py; every wait goes through the given `Clock`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from noetl_stream import jsonutil
from noetl_stream.dsl import guards, layering, templating
from noetl_stream.dsl.context import build_context, step_view, task_view
from noetl_stream.dsl.models import Rule, Task
from noetl_stream.errors import KeychainError, NoetlStreamError, TemplateError
from noetl_stream.jsonutil import JsonObject
from noetl_stream.messages import Command
from noetl_stream.observe import task_log, tracing
from noetl_stream.tools.base import Outcome, TaskCall
from noetl_stream.tools.registry import ToolRegistry
from noetl_stream.worker import cursor
from noetl_stream.worker.clock import SYSTEM_CLOCK, Clock
from noetl_stream.worker.keychain import KeychainResolver
from noetl_stream.worker.polling import Polling
from noetl_stream.worker.redact import secret_values
from noetl_stream.worker.retrying import (
    ActionEvents,
    EventSink,
    backoff_delay,
    outcome_fields,
    retry_names,
)
from noetl_stream.worker.sinks import SinkRuns
from noetl_stream.worker.task_inputs import TaskInput, TaskInputs
from noetl_stream.worker.task_views import (
    case_views,
    kept_task_result,
    outcome_views,
    reads_names,
    rendered_call,
    sink_view,
    with_task_results,
)

MAX_STEPS_PER_PIPELINE = 100_000  # a jump loop that never ends is a bug; stop it with a reason
OUTPUT_EVENT_BYTES = 256 * 1024  # captured output one outcome event carries, all tasks together


@dataclass
class PipelineResult:
    ok: bool
    result: object = None
    error: dict[str, Any] | None = None
    ctx_patch: dict[str, Any] = field(default_factory=dict)
    http: dict[str, Any] | None = None
    tasks_run: int = 0
    route: str | None = None  # set by a case rule with `next`: only the step's arcs with it fire
    case_matched: list[object] | None = None  # spec 001 case: the branches found true
    cursor: JsonObject | None = None  # a cursor loop iteration's claim: exhausted, replayed
    output: dict[str, dict[str, object]] | None = None  # task -> captured stdout/stderr (events.py)
    input: dict[str, TaskInput] | None = None  # task -> its rendered call (task_inputs.py)


def bounded_output(captured: Mapping[str, Mapping[str, object]],
                   budget: int = OUTPUT_EVENT_BYTES) -> dict[str, dict[str, object]]:
    """Captured output within `budget` bytes: the last tasks' text is kept, earlier tasks keep
    their sizes with the text dropped (`truncated`), so the event stays far below NATS's limit.
    """
    kept: dict[str, dict[str, object]] = {}
    left = budget
    for name in reversed(list(captured)):
        out = dict(captured[name])
        size = len(str(out.get("stdout", "")).encode()) + len(str(out.get("stderr", "")).encode())
        if size > left:
            out.update(stdout="", stderr="", truncated=True)
        else:
            left -= size
        kept[name] = out
    return {name: kept[name] for name in captured}


def _handles_failures(rule: Rule) -> bool:
    """May this rule decide what happens to a failed call? Only an `else`, a `call.error` rule,
    a retry clause (its own guards are about failures) or a guard that reads the failure
    (dsl/guards.py); `{{ event.name == 'call.done' }}` alone never swallows an error.
    """
    return (rule.when is None or rule.event == "call.error" or rule.scope is not None
            or guards.reads_failure(rule.when))


@dataclass
class _Position:
    """Where a pipeline stands: task, attempt, result handed on (`_prev`), last non-sink outcome."""

    pc: int = 0
    attempt: int = 1
    prev: object = None
    last: Outcome | None = None
    executed: int = 0


@dataclass(frozen=True)
class _Settled:
    """One call and what its task's policy made of it."""

    task: Task
    outcome: Outcome
    extra: dict[str, object]  # the names the policy's templates read
    read: object  # the result as read by the task's name
    rule: Rule | None
    directive: str


_Handler = Callable[["Pipeline", _Settled, _Position], Awaitable["PipelineResult | None"]]


class Pipeline:
    def __init__(self, command: Command, tools: ToolRegistry,
                 idempotency_prefix: str, keychain: KeychainResolver | None = None,
                 on_event: EventSink | None = None, clock: Clock = SYSTEM_CLOCK) -> None:
        self.cmd = command
        self.clock = clock
        self.events = ActionEvents(command, on_event)  # retry.* / poll.* events
        self.chain = 1  # attempt of the whole pipeline (retry scope `chain`)
        self.chain_open = False  # a chain re-run whose retry.processed is still due
        self.poll = Polling(clock)
        self.sinks = SinkRuns(self.events)
        self.keychain_resolver = keychain
        self.keychain: Mapping[str, object] = {}  # resolved entries, read as `keychain.<name>`
        self.tools = tools
        self.key_prefix = idempotency_prefix
        self.captured: dict[str, dict[str, object]] = {}  # task -> its last call's printed output
        self.inputs = TaskInputs()
        ctx_in = command.context
        self.tasks = list(command.tasks.tasks)  # validated once per distinct list (task_list.py)
        self.index = {t.name: i for i, t in enumerate(self.tasks)}
        self.workload = ctx_in.workload
        self.ctx: dict[str, object] = dict(ctx_in.ctx)
        self.iter = dict(ctx_in.iter)
        self.vars = ctx_in.vars
        http = ctx_in.steps_http
        loops = set(ctx_in.steps_loop)
        self.steps = {n: step_view(r, h if isinstance(h := http.get(n), dict) else None, n in loops,
                                   execution_id=command.execution_id) for n, r in ctx_in.steps.items()}
        self.token_args = ctx_in.args
        self.args: dict[str, object] = dict(self.token_args)
        self.locals: dict[str, object] = {}
        self.ctx_patch: dict[str, Any] = {}
        self.overrides: dict[str, dict[str, object]] = {}  # task -> config from a case `call`
        self.route: str | None = None
        self.route_priority = 0  # of `route`: a later route replaces it only with a higher one
        self.case_matched: list[object] | None = None
        self.secrets: set[str] = set()  # values tools marked secret; the worker masks them
        self.kept: dict[str, object] | None = {} if command.task_results else None
        self.step = command.step
        self.own_task = self._own_task()

    def _own_task(self) -> str | None:
        """The task whose result a single-tool step's templates also read by the step's name.

        NoETL names a single tool's task after its step, so its policy reads the call's result
        as `{{ <step>.x }}`; here that task is `<step>_task`. Only for a step with one task
        besides its sinks, and never when a task of the step is itself named like the step.
        """
        calls = [t.name for t in self.tasks if t.sink is None]
        return calls[0] if len(calls) == 1 and self.step not in self.index else None

    def context(self, extra: Mapping[str, object] | None = None) -> dict[str, object]:
        return build_context(workload=self.workload, ctx=self.ctx, args=self.args,
                             iter_vars=self.iter, vars_=self.vars, steps=self.steps,
                             execution_id=self.cmd.execution_id,
                             extra={**self.locals, **(extra or {}), "keychain": self.keychain})

    async def run(self) -> PipelineResult:
        claim: cursor.ClaimResult | None = None
        try:
            await self._resolve_keychain()
            if self.cmd.cursor:  # a cursor loop iteration: claim its item first
                claim = await cursor.claim_item(self.cmd, self.cmd.cursor, self.tools, self.context())
                if claim.row is None:  # nothing left to claim, or the claim failed
                    return PipelineResult(claim.error is None, error=claim.error,
                                          cursor=claim.report)
                self.iter[self.cmd.cursor.iterator] = claim.row
            step_args = self.cmd.step_args or {}
            if step_args:
                rendered = templating.render(step_args, self.context(), step=self.step, field="input")
                self.args = {**self.token_args, **rendered}
            result = await self._run_tasks()
        except TemplateError as exc:
            located = exc.at(self.cmd.source_file, self.cmd.step_line)
            result = PipelineResult(False, error={"message": str(located), "kind": "template"},
                                    ctx_patch=self.ctx_patch)
        except KeychainError as exc:
            result = PipelineResult(False, error={"message": str(exc), "kind": "keychain",
                                                  "entry": exc.entry})
        if claim is not None:
            result.cursor = claim.report
        result.output, result.input = bounded_output(self.captured) or None, self.inputs.bounded()
        return result

    async def _resolve_keychain(self) -> None:
        declarations = self.cmd.keychain
        if not declarations:
            return
        if self.keychain_resolver is None:
            raise KeychainError(str(declarations[0].get("name")), "this worker cannot resolve "
                                "keychain entries")
        resolved = await self.keychain_resolver.resolve(
            declarations, self.context(), execution_id=self.cmd.execution_id)
        self.keychain = resolved.values
        self.secrets.update(resolved.secrets)

    async def _run_tasks(self) -> PipelineResult:
        pos = _Position()
        while pos.pc < len(self.tasks):
            pos.executed += 1
            if pos.executed > MAX_STEPS_PER_PIPELINE:
                return self._failed(f"pipeline ran {MAX_STEPS_PER_PIPELINE} tasks without ending; "
                                    "a jump loop never stops", "pipeline", pos.last)
            settled = await self._run_task(self.tasks[pos.pc], pos)
            if settled is None:  # a sink its `when` skipped
                pos.pc += 1
                continue
            failed = await _HANDLERS[settled.directive](self, settled, pos)
            if failed is not None:
                return failed
        assert pos.last is not None
        await self._close_chain("ok")
        result = pos.prev if self.kept is None else with_task_results(pos.prev, self.kept)
        return PipelineResult(True, result=result, ctx_patch=self.ctx_patch, http=pos.last.http,
                              tasks_run=pos.executed, route=self.route,
                              case_matched=self.case_matched)

    async def _run_task(self, task: Task, pos: _Position) -> _Settled | None:
        """Call one task and settle its outcome; None for a sink whose `when` does not hold."""
        view = None
        if task.sink is not None:
            view = sink_view(pos.prev, pos.last)
            if pos.attempt == 1 and not await self._sink_admitted(task, view):
                return None
        await self._poll_start(task)
        outcome = await self._call(task, pos.attempt, pos.prev, view)
        if pos.attempt > 1:
            await self._event("retry.processed", task.name, pos.attempt, scope="tool",
                              **outcome_fields(outcome))
        if task.sink is None:
            pos.last = outcome
        return self._settle(task, outcome, pos)

    def _settle(self, task: Task, outcome: Outcome, pos: _Position) -> _Settled:
        extra = {**outcome_views(task, outcome), **case_views(outcome), "_prev": pos.prev,
                 "_task": task.name, "_attempt": pos.attempt, "result": outcome.result,
                 "error": outcome.error, "_chain_attempt": self.chain,
                 "_retry": retry_names(outcome, pos.attempt)}
        read = task_view(outcome.result, outcome.http)  # the result read by name
        if task.name == self.own_task:
            extra.setdefault(self.step, read)
        rule, directive = self._decide(task, extra, outcome.ok, pos.attempt)
        return _Settled(task, outcome, extra, read, rule, directive)

    def _decide(self, task: Task, extra: Mapping[str, object], ok: bool,
                attempt: int) -> tuple[Rule | None, str]:
        """The rule that holds and its directive: continue on success, fail on error without one."""
        default = "continue" if ok else "fail"
        rule = self._match(task, extra, ok)
        do = rule.do if rule is not None else default
        while do == "retry" and rule is not None:
            count = self.chain if rule.scope == "chain" else attempt
            if count < rule.attempts:
                break
            # A retry clause that has run out hands the outcome to the rules after it.
            rule = self._match(task, extra, ok, after=rule) if rule.scope else None
            do = rule.do if rule is not None else default
        return rule, do

    # -- one handler per directive -------------------------------------------------------------
    async def _on_retry(self, s: _Settled, pos: _Position) -> PipelineResult | None:
        assert s.rule is not None
        if s.rule.scope == "chain":
            await self._retry_chain(s.rule, s.task, s.outcome)
            pos.pc, pos.attempt, pos.prev = 0, 1, None
            return None
        await self._retry_started(s.rule, s.task, pos.attempt, "tool", s.outcome)
        pos.attempt += 1
        return None

    async def _on_fail(self, s: _Settled, pos: _Position) -> PipelineResult | None:
        if (failed := await self._finish_sinks(s, pos)) is not None:
            return failed
        await self._close_chain("error")
        failed = self._failed(self._error_message(s.task, s.outcome, pos.attempt), "task",
                              s.outcome, s.task)
        if failed.error is not None and (pos.attempt > 1 or self.chain > 1):
            failed.error["attempts"] = pos.attempt
            if self.chain > 1:
                failed.error["chain_attempts"] = self.chain
        return failed

    async def _on_continue(self, s: _Settled, pos: _Position) -> PipelineResult | None:
        return await self._move_on(s, pos, pos.pc + 1)

    async def _on_jump(self, s: _Settled, pos: _Position) -> PipelineResult | None:
        assert s.rule is not None and s.rule.to is not None
        return await self._move_on(s, pos, self.index[s.rule.to])

    async def _on_break(self, s: _Settled, pos: _Position) -> PipelineResult | None:
        return await self._move_on(s, pos, len(self.tasks))  # past the last task: the pipeline ends

    async def _move_on(self, s: _Settled, pos: _Position, target: int) -> PipelineResult | None:
        """Leave a task that did not fail for `target`, unless its poll wants another round."""
        if s.outcome.ok and self.poll.polls(s.task.name) and not await self._poll_done(
                s.task, s.outcome, pos.attempt, s.extra):
            if self.poll.task is None:  # gave up: max_attempts or deadline
                await self._close_chain("error")
                return self._failed(self._poll_message(s.task), "poll_timeout", s.outcome, s.task)
            pos.attempt = 1
            return None
        if (failed := await self._finish_sinks(s, pos)) is not None:
            return failed
        self._hand_on(s, pos)
        pos.pc = target
        return None

    async def _finish_sinks(self, s: _Settled, pos: _Position) -> PipelineResult | None:
        """A sink task's `sink.processed`, then the rule's own sinks; the failure of one, if any."""
        if s.task.sink is not None:
            await self.sinks.processed(s.task, pos.attempt, s.outcome, self.chain)
        if s.rule is not None and s.rule.sink and (failed := await self._rule_sinks(
                s.rule, sink_view(s.outcome.result, s.outcome))) is not None:
            await self._close_chain("error")
            return failed
        return None

    def _hand_on(self, s: _Settled, pos: _Position) -> None:
        """Apply the writes and case of a finished task and hand its result to the next task."""
        self._apply_writes(s.task, s.rule, s.extra, s.read)
        value = s.outcome.result
        if s.rule is not None:
            value = self._apply_case(s.task, s.rule, s.extra, value)
        self._bind(s.task, s.read if value is s.outcome.result else value)
        if s.task.sink is None:  # a sink stores the result; it does not replace it
            pos.prev = value
            if self.kept is not None:
                self.kept[s.task.name] = kept_task_result(s.outcome, value)
        pos.attempt = 1

    def _bind(self, task: Task, view: object) -> None:
        """Name a task's result for the templates after it: `{{ fetch.status_code }}` reads a
        task's own result through the same views as a finished step's (dsl/views.py); a
        result a case rule replaced is bound as written.
        """
        self.locals[task.name] = view
        if task.name == self.own_task:
            self.locals[self.step] = view

    # -- retry clause and poll (worker/retrying.py) ----------------------------------------
    def _key(self, task: Task, attempt: int) -> str:
        """The idempotency key of one call: new for every attempt, chain re-run and poll round."""
        key = f"{self.key_prefix}:{task.name}:{attempt}"
        if self.sinks.run_of(task.name) > 1:
            key += f":s{self.sinks.run_of(task.name)}"
        if self.chain > 1:
            key += f":c{self.chain}"
        if self.poll.round_of(task.name) > 1:
            key += f":p{self.poll.round}"
        return key

    async def _event(self, event_type: str, task: str | None, attempt: int, **fields: object) -> None:
        await self.events.publish(event_type, task, chain=self.chain, round_=self.poll.round_of(task),
                                  attempt=attempt, **fields)

    async def _retry_started(self, rule: Rule, task: Task, attempt: int, scope: str,
                             outcome: Outcome) -> None:
        wait = backoff_delay(rule, attempt, self._key(task, attempt))
        name = task.name if scope == "tool" else None
        await self._event("retry.started", name, attempt + 1, scope=scope, delay_s=wait,
                          max_attempts=rule.attempts, after=outcome_fields(outcome),
                          failed_task=task.name)
        await self.clock.sleep(wait)

    async def _retry_chain(self, rule: Rule, task: Task, outcome: Outcome) -> None:
        """Re-run the pipeline from its first task: one chain attempt more."""
        await self._close_chain("error")
        await self._retry_started(rule, task, self.chain, "chain", outcome)
        self.chain += 1
        self.chain_open = True
        self.poll.stop()

    async def _close_chain(self, status: str) -> None:
        if self.chain_open:
            self.chain_open = False
            await self._event("retry.processed", None, self.chain, scope="chain", status=status)

    async def _poll_start(self, task: Task) -> None:
        if task.poll is None or self.poll.polls(task.name):
            return
        self.poll.begin(task.name)
        await self._event("poll.started", task.name, 1, interval_s=task.poll.interval,
                          max_attempts=task.poll.max_attempts, deadline_s=task.poll.deadline)

    async def _poll_done(self, task: Task, outcome: Outcome, attempt: int,
                         extra: Mapping[str, object]) -> bool:
        """Whether `until` holds; if not, wait for the next round (or give up: poll.task None)."""
        poll = task.poll
        assert poll is not None
        context = {**self.context(extra), **retry_names(outcome, attempt)}
        done = templating.evaluate_guard(poll.until, context, step=self.step,
                                         field=f"tool.{task.name}.poll.until")
        await self._event("poll.attempt", task.name, attempt, poll_attempt=self.poll.round,
                          done=done, **outcome_fields(outcome))
        if done:
            await self._event("poll.done", task.name, attempt, poll_attempts=self.poll.round)
            self.poll.stop()
            return True
        elapsed = self.poll.elapsed()
        if self.poll.gives_up(poll, elapsed):
            await self._event("poll.timeout", task.name, attempt, poll_attempts=self.poll.round,
                              elapsed_s=round(elapsed, 3))
            self.poll.stop()
            return False
        await self.poll.next_round(poll)
        return False

    def _poll_message(self, task: Task) -> str:
        assert task.poll is not None
        return (f'task "{task.name}" ({task.kind}): poll gave up before `until` held '
                f"(max_attempts {task.poll.max_attempts}, deadline {task.poll.deadline} s)")

    async def _call(self, task: Task, attempt: int, prev: object,
                    view: Mapping[str, object] | None = None) -> Outcome:
        context = self.context({"_prev": prev, "_task": task.name, "_attempt": attempt,
                                **(view or {})}) if reads_names(task) else {}
        try:
            config, inputs = rendered_call(task, context, self.step)
            if task.name in self.overrides:
                config = layering.merge(config, self.overrides[task.name])
        except TemplateError as exc:
            located = exc.at(self.cmd.source_file, task.line or self.cmd.step_line)
            return Outcome.failure(str(located), "template")
        if task.kind == "python":
            inputs = {**self.args, **inputs}
        self.inputs.record(task.name, task.kind, attempt, config, inputs)
        call = TaskCall(
            execution_id=self.cmd.execution_id, step=self.step, task=task.name, kind=task.kind,
            config=config, input=inputs, spec=task.spec,
            idempotency_key=self._key(task, attempt), attempt=attempt,
            timeout_s=layering.timeout_s(task.spec), iteration=self._iteration(),
            step_run_id=self.cmd.step_run_id, command_iteration=self.cmd.iteration,
            context=context if task.kind == "python" else None)
        with tracing.task_span(task.name, task.kind, attempt) as span, task_log.logged(
                execution_id=call.execution_id, step=self.step, task=task.name, kind=task.kind,
                attempt=attempt, iteration=call.command_iteration) as ended:
            try:
                outcome = await self.tools.get(task.kind).run(call)
            except NoetlStreamError as exc:
                outcome = Outcome.failure(str(exc), "tool")
            except Exception as exc:  # a tool's own bug is its failure, not a malformed command
                outcome = Outcome.failure(f"{type(exc).__name__}: {exc}", "tool")
            tracing.finish(span, outcome.ok, outcome.error)
            ended(outcome.ok, outcome.error)
        printed = outcome.meta.get("output")
        if isinstance(printed, dict) and (printed.get("stdout_bytes") or printed.get("stderr_bytes")):
            self.captured[task.name] = {**printed, "attempt": attempt}
        self.secrets.update(secret_values(outcome))
        return outcome

    def _iteration(self) -> JsonObject | None:
        """The innermost loop iteration this pipeline runs in (spec 002 §6.4): its own `iter` in
        a loop step, else the one a child execution inherited as `iter.parent`.
        """
        if self.cmd.iteration is not None:
            return dict(self.iter)
        parent = self.iter.get("parent")
        return parent if isinstance(parent, dict) else None

    def _match(self, task: Task, extra: Mapping[str, object], ok: bool,
               after: Rule | None = None) -> Rule | None:
        """The first rule whose guard holds (only rules past `after`, when given)."""
        if not task.rules:
            return None
        context = self.context(extra)
        rules = task.rules
        if after is not None:
            rules = rules[next(i for i, r in enumerate(rules) if r is after) + 1:]
        for rule in rules:
            if rule.event == "call.error" and ok:
                continue
            if not ok and not _handles_failures(rule):
                continue
            guard_context = context
            field = f"tool.{task.name}.spec.policy.when"
            if rule.scope is not None and isinstance(names := extra["_retry"], dict):  # retry clause
                attempt = extra["_chain_attempt"] if rule.scope == "chain" else names["attempt"]
                guard_context = {**context, **names, "attempt": attempt,
                                 "max_attempts": rule.attempts}
                field = f"tool.{task.name}.retry"
            if rule.event is not None:  # a case rule: its guard reads event.name
                guard_context = {**context, "event": {"name": rule.event, "payload": {
                    "result": extra["result"], "error": extra["error"]}}}
                field = "case.when"
            if templating.evaluate_guard(rule.when, guard_context, step=self.step, field=field):
                return rule
        return None

    def _apply_case(self, task: Task, rule: Rule, extra: Mapping[str, object], value: object) -> object:
        """A case rule's `call` overrides, `route` and `result`; returns the task's result."""
        # The first `next` reached wins, unless a later one has a higher `next.priority` (defer).
        if rule.route is not None and (self.route is None or rule.priority > self.route_priority):
            self.route, self.route_priority = rule.route, rule.priority
        if rule.case_matched is not None:
            matched = templating.render(rule.case_matched, self.context(extra), step=self.step,
                                        field="case.when")
            self.case_matched = list(matched) if isinstance(matched, list) else []
        if not (rule.call or rule.result is not None):
            return value
        context = self.context(extra)
        if rule.call:
            rendered = templating.render(rule.call, context, step=self.step, field="case.call")
            self.overrides[task.name] = layering.merge(self.overrides.get(task.name, {}), rendered)
        if rule.result is not None:
            value = templating.render(rule.result, context, step=self.step, field="case.result")
        return value

    def _apply_writes(self, task: Task, rule: Rule | None, extra: Mapping[str, object],
                      read: object) -> None:
        """A rule's writes, then the task's own `set:`.

        A policy rule reads `output` as the outcome envelope (`output.status`, `output.data`);
        the task's own `set:` reads it as the result the tool returned, read by name (NoETL's
        task sequence binds the raw result there: `set: {row: "{{ output }}"}` then
        `{{ row.data.id }}` reads the result's own `data`).
        """
        if rule is not None and rule.event is not None:  # a case rule's writes read event.name
            extra = {**extra, "event": {"name": rule.event, "payload": {
                "result": extra["result"], "error": extra["error"]}}}
        groups = [(rule.set_iter, rule.set_ctx, rule.set_locals, extra)] if rule is not None else []
        groups.append((task.set_iter, task.set_ctx, task.set_locals, {**extra, "output": read}))
        for set_iter, set_ctx, set_locals, names in groups:
            if not (set_iter or set_ctx or set_locals):
                continue
            context = self.context(names)
            self.iter.update(jsonutil.to_plain(  # it travels on as JSON (a child's parent_iter)
                templating.render(set_iter, context, step=self.step, field="set_iter")))
            written = templating.render(set_ctx, context, step=self.step, field="set_ctx")
            self.ctx.update(written)
            self.ctx_patch.update(written)
            self.locals.update(templating.render(set_locals, context, step=self.step, field="set"))

    # -- sinks ---------------------------------------------------------------------------------
    async def _sink_admitted(self, task: Task, view: Mapping[str, object]) -> bool:
        assert task.sink is not None
        admitted = task.sink.when is None or templating.evaluate_guard(
            task.sink.when, self.context(view), step=self.step, field=f"{task.sink.source}.when")
        return await self.sinks.admit(task, admitted, self.chain)

    async def _rule_sinks(self, rule: Rule, view: Mapping[str, object]) -> PipelineResult | None:
        """Run a case rule's sinks in order; the failure of the first that fails, if any."""
        for sink in rule.sink:
            if not await self._sink_admitted(sink, view):
                continue
            outcome = await self._call(sink, 1, view["result"], view)
            await self.sinks.processed(sink, 1, outcome, self.chain)
            self._bind(sink, task_view(outcome.result, outcome.http))
            if not outcome.ok:
                return self._failed(self._error_message(sink, outcome), "sink", outcome, sink)
        return None

    def _error_message(self, task: Task, outcome: Outcome, attempt: int = 1) -> str:
        message = (outcome.error or {}).get("message", "task failed")
        tries = [f"{attempt} attempts"] if attempt > 1 else []
        if self.chain > 1:
            tries.append(f"{self.chain} runs of the pipeline")
        after = f" after {' and '.join(tries)}" if tries else ""
        return f'task "{task.name}" ({task.kind}) failed{after}: {message}'

    def _failed(self, message: str, kind: str, outcome: Outcome | None,
                task: Task | None = None) -> PipelineResult:
        error = dict(outcome.error or {}) if outcome is not None else {}
        error.update({"message": message, "kind": error.get("kind", kind)})
        if task is not None:
            error["task"] = task.name
        return PipelineResult(False, error=error, ctx_patch=self.ctx_patch,
                              http=outcome.http if outcome else None)


_HANDLERS: dict[str, _Handler] = {
    "continue": Pipeline._on_continue, "retry": Pipeline._on_retry, "jump": Pipeline._on_jump,
    "break": Pipeline._on_break, "fail": Pipeline._on_fail,
}
