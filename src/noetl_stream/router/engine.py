"""Router rules (ARCHITECTURE §7): tokens, admission, arcs, joins with dead-path elimination,
back-edges, loops, failure routing, completion. Deterministic: the same state and event always
yield the same state and outbox.

`apply` works on the state it is given and returns its decision: that state and the outbox the
event implies (also kept in `state.outbox`, which is committed with the state so a crash before
publishing loses nothing). Callers that need the old state keep a copy
(`ExecutionState.from_dict(state.to_dict())`). The rule modules (loops, listeners, watchdog,
cancel, children, case events) see the engine through `router.interface.Router` only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from noetl_stream import ids, jsonutil, messages
from noetl_stream.dsl import guards, keychain, templating
from noetl_stream.dsl.context import build_context, output_view
from noetl_stream.dsl.models import Arc, Playbook, Rule, Step
from noetl_stream.dsl.values import EventName
from noetl_stream.errors import TemplateError
from noetl_stream.events import (
    CancelRequested,
    ChildStarted,
    ExecutionAdmitted,
    OutcomeEvent,
    Replayed,
    RestartRequested,
    TimerFired,
)
from noetl_stream.jsonutil import JsonValue
from noetl_stream.router import admission, cancel, case_events, children, listeners, loops, restart, watchdog
from noetl_stream.router.failures import file_of, template_failure
from noetl_stream.router.graph import graph_of
from noetl_stream.router.reads import names_read, only, pick_steps, rule_templates
from noetl_stream.router.state import Decision, Delayed, ExecutionState, Join, Outgoing, Run
from noetl_stream.router_events import RouterEvent

DEFAULT_POOL = "default"
DELAY_TIMER_PREFIX = "next."  # the timer of a delayed token (`next.spec.delay`)
# What NoETL's Python engine calls the end of a plain step's call, when its arcs are evaluated.
CALL_EVENTS = {"step.done": ("call.done",), "step.failed": ("call.error",)}
PROGRESS_EVENTS = frozenset({"step.started", "step.skipped", "loop.started", "loop.progress",
                             *case_events.EVENTS})


class Engine:
    """One execution's state while one event is applied to it (implements `Router`)."""

    def __init__(self, playbook: Playbook, state: ExecutionState, now: float) -> None:
        self.pb = playbook
        self.state = state
        self.now = now
        self.graph = graph_of(playbook)
        self.names = playbook.step_index  # membership only: steps by name, built once
        self.case_matched: list[str] = []  # spec 001: branches the current outcome found true

    # -- messages --------------------------------------------------------------------------
    def emit(self, event_type: str, msg_id: str, **payload: object) -> None:
        """Queue an event; the ones only watchers read go out without waiting for a store ack."""
        body = {"event_id": msg_id, **messages.event_body(
            event_type, self.state.execution_id, self.now,
            parent_execution_id=self.state.parent_execution_id), **payload}
        self.send(Outgoing("event", msg_id, body, event_type=event_type,
                           progress=event_type in PROGRESS_EVENTS))

    def send(self, message: Outgoing) -> None:
        self.state.outbox.append(message)

    def context(self, *, reads: Iterable[Any] = (), args: Mapping[str, object] | None = None,
                extra: Mapping[str, object] | None = None) -> dict[str, Any]:
        """A router-side template context: the finished steps among the names the templates in
        `reads` name, beside the workload, ctx, vars and `args` they may always read.
        """
        steps = pick_steps(names_read(reads), self.state.steps, self.state.execution_id)
        return build_context(workload=self.state.workload, ctx=self.state.ctx, args=args,
                             vars_=self.state.vars, iter_vars=self.inherited_iter(), steps=steps,
                             execution_id=self.state.execution_id, extra=extra)

    def inherited_iter(self) -> dict[str, Any]:
        """`iter` outside the step's own loop: the parent's iteration of a child execution
        (spec 002 §6.4), so `iter.parent.<name>` reads the item the parent loop is on.
        """
        return {"parent": self.state.parent_iter} if self.state.parent_iter is not None else {}

    # -- tokens ----------------------------------------------------------------------------
    def deliver(self, src: str | None, dst: str, args: dict[str, JsonValue]) -> None:
        """A token from `src` (None for the start) reaches `dst`."""
        if dst not in self.names:
            return  # an arc to an implicit `end` simply ends the branch
        if src is not None and self.graph.is_join(dst) and not self.graph.is_back_edge(src, dst):
            join = self.state.joins.setdefault(dst, Join())
            join.arrived[src] = True
            join.args.update(args)
            self.try_join(dst)
            return
        self.fire(dst, args)

    def rule_out(self, src: str, dst: str) -> None:
        """The arc src -> dst will carry no token this time (dead-path elimination)."""
        if dst not in self.names or self.graph.is_back_edge(src, dst):
            return
        if self.graph.is_join(dst):
            join = self.state.joins.setdefault(dst, Join())
            join.arrived.setdefault(src, False)
            self.try_join(dst)
            return
        self.mark_dead(dst)

    def try_join(self, step: str) -> None:
        join = self.state.joins[step]
        preds = self.graph.forward_preds[step]
        if not all(p in join.arrived for p in preds):
            return
        del self.state.joins[step]
        if any(join.arrived.values()):
            self.fire(step, join.args)
        else:
            self.mark_dead(step)

    def mark_dead(self, step: str) -> None:
        rec = self.state.record(step)
        if rec.runs == 0 and rec.status == "pending":
            rec.status = "skipped"
        for arc in self.pb.step(step).next.arcs:
            self.rule_out(step, arc.step)

    # -- firing ----------------------------------------------------------------------------
    def fire(self, name: str, args: dict[str, JsonValue]) -> None:
        step = self.pb.step(name)
        if step.admit and not self.admitted(step, args):
            rec = self.state.record(name)
            if rec.runs == 0:
                rec.status = "skipped"
            self.emit("step.skipped", ids.event_msg_id(self.state.execution_id, "step.skipped", name,
                                                        rec.runs), step=name, reason="admission")
            for arc in step.next.arcs:
                self.rule_out(name, arc.step)
            return
        rec = self.state.record(name)
        rec.runs += 1
        rec.status = "running"
        run_id = ids.step_run_id(self.state.execution_id, name, rec.runs)
        run = Run(run_id=run_id, step=name, run_no=rec.runs, args=dict(args), issued_at=self.now)
        self.state.runs[run_id] = run
        self.emit("step.started", ids.event_msg_id(self.state.execution_id, "step.started", run_id),
                  step=name, step_run_id=run_id, run=rec.runs)
        if step.enter and not self.enter_step(step, run):
            return
        if step.eval_mode == "on_event":
            # A listener runs no command: it stays active and hears later events (listeners.py).
            listeners.hear(self, step, run, {"name": "step.enter", "data": None, "step": name,
                                             "payload": {}})
            return
        if step.loop is None:
            self.command(step, run, None, None)
            return
        loops.start(self, step, run)

    def admitted(self, step: Step, args: dict[str, JsonValue]) -> bool:
        # Admission happens as the step is entered: a case `skip` on step.enter is a rule here.
        context = self.context(reads=[r.when for r in step.admit], args=args,
                               extra={"event": {"name": "step.enter", "payload": {}}})
        for rule in step.admit:
            try:
                if templating.evaluate_guard(rule.when, context, step=step.name,
                                             field="spec.policy.admit"):
                    return rule.allow
            except TemplateError:
                return False
        return True

    def command(self, step: Step, run: Run, index: int | None, item: object) -> None:
        names: frozenset[str] | set[str] = self.graph.command_reads[step.name]
        if step.name in self.graph.reads_context:  # code reading `context` may read any of it
            names = names | {"workload", "ctx", *self.state.steps}
        iter_vars = self.inherited_iter()
        if index is not None and step.loop is not None:
            total = loops.iteration_count(run.loop) if run.loop is not None else None
            iter_vars = {**iter_vars, **loops.iteration_vars(step.loop, index, item, total)}
        steps = pick_steps(names, self.state.steps)
        http: dict[str, JsonValue] = {
            n: self.state.steps[n].http for n in steps if self.state.steps[n].http}
        loop_steps = [n for n in steps if self.state.steps[n].loop]
        body = messages.command_body(
            execution_id=self.state.execution_id,
            playbook=self.pb.path or self.pb.name,  # for metrics and traces
            step=step.name,
            step_run_id=run.run_id,
            parent_execution_id=self.state.parent_execution_id,
            iteration=index,
            tasks=self.graph.task_lists[step.name],
            step_args=step.args,
            context=messages.command_context(
                workload=only(self.state.workload, names, "workload"),
                ctx=only(self.state.ctx, names, "ctx"),
                args=run.args,
                iter=iter_vars,
                vars=self.state.vars,
                steps={n: self.state.steps[n].result for n in steps},
                steps_http=http,
                steps_loop=loop_steps,
            ),
            keychain=keychain.for_command(
                self.pb.keychain, names,
                first=run.run_no == 1 and step.name == self.graph.start),
            max_payload_bytes=self.graph.max_payload_bytes,
            source_file=file_of(self), step_line=step.line, restart=self.state.restarts,
            task_results=step.name in self.graph.task_results, cursor=loops.command_cursor(step))
        kind = step.tasks[0].kind if len(step.tasks) == 1 else "pipeline"
        self.send(Outgoing("command", ids.command_msg_id(run.run_id, index), body,
                           pool=step.pool or DEFAULT_POOL, tool_kind=kind))
        watchdog.arm(self, step, run, index)

    # -- outcomes --------------------------------------------------------------------------
    def on_outcome(self, event: OutcomeEvent) -> None:
        run = self.state.runs.get(event.step_run_id)
        if run is None or run.status != "running":
            return  # a duplicate or late outcome: already applied
        ok = event.event_type in ("step.done", "loop.iteration.done")
        index = event.iteration  # a whole number: decoding refuses anything else
        error = event.error
        if ok and (index is None) == (run.loop is None) and (
                run.loop is None or index in run.loop.in_flight):
            case_events.evaluated(self, self.pb.step(run.step), run, event)
        if run.loop is None:
            if index is not None:
                return
            self.patch_ctx(ok, event)
            rec = self.state.record(run.step)
            rec.http = event.http
            self.finish_run(run, ok=ok, result=event.result, error=error,
                            route=(event.route or None) if ok else None)
            return
        if index is not None and index in run.loop.in_flight:
            loops.on_outcome(self, run, index, ok, event, error)

    def patch_ctx(self, ok: bool, event: OutcomeEvent) -> None:
        if ok and event.ctx_patch is not None:
            self.state.ctx.update(event.ctx_patch)

    def finish_run(self, run: Run, *, ok: bool, result: JsonValue, error: dict[str, JsonValue] | None,
                   route: str | None = None) -> None:
        step = self.pb.step(run.step)
        if ok and step.exit:
            ok, result, error, route = self.exit_step(step, run, result, route)
        run.status = "done" if ok else "failed"
        run.loop = None  # iteration bookkeeping is no longer needed; keep snapshots small
        rec = self.state.record(run.step)
        rec.status = "completed" if ok else "failed"
        self.state.set_result(rec, result)
        rec.error = error
        rec.loop = step.loop is not None
        if ok:
            event_name = "loop.done" if step.loop is not None else "step.done"
            self.state.set_result(self.state, result)
        else:
            event_name = "step.failed"
        if step.loop is not None or not ok:
            # The worker reported step.done itself; loop.done and failures of loops are ours.
            etype = "loop.done" if ok else "loop.failed" if step.loop is not None else ""
            if etype:
                self.emit(etype, ids.event_msg_id(self.state.execution_id, etype, run.run_id),
                          step=run.step, step_run_id=run.run_id, status="ok" if ok else "error",
                          error=error)
        name = EventName(event_name, CALL_EVENTS.get(event_name, ()) if step.loop is None else ())
        context_extra = {"event": {"name": name, "payload": {"result": result, "error": error}},
                         "result": result, "error": error,
                         "output": output_view(result, error, rec.http, loop=rec.loop)}
        try:
            if ok:
                self.apply_step_writes(step, run, context_extra)
            self.route(step, run, ok, error, context_extra, route)
        except TemplateError as exc:
            error = template_failure(self, step, exc)
            if ok:  # its `set:`/`vars:` or arcs failed: the step did not complete after all
                rec.status, rec.error = "failed", error
            self.fail_execution(run.step, error)
        self.state.runs.pop(run.run_id, None)

    def apply_step_writes(self, step: Step, run: Run, extra: Mapping[str, object]) -> None:
        if step.set_ctx:
            context = self.context(reads=[step.set_ctx], args=run.args, extra=extra)
            values = templating.render_data(step.set_ctx, context, step=step.name, field="set")
            for key in sorted(values):
                problem = jsonutil.storable_problem(values[key])
                if problem is not None:
                    raise TemplateError(f"the value cannot be stored: {problem}",
                                        expression=str(step.set_ctx.get(key)), step=step.name,
                                        field=f"set.{key}")
            self.state.ctx.update(values)
        if step.vars:
            context = self.context(reads=[step.vars], args=run.args, extra=extra)
            self.state.vars.update(templating.render_data(step.vars, context, step=step.name, field="vars"))

    def enter_step(self, step: Step, run: Run) -> bool:
        """Case `step.enter` rules: the first true one writes ctx or fails the run (False)."""
        extra = {"event": {"name": "step.enter", "payload": {}}}
        reads = rule_templates(step.enter)
        try:
            rule = self.first_rule(step.enter, self.context(reads=reads, args=run.args,
                                                            extra=extra), step)
            if rule is not None and rule.set_ctx:
                self.state.ctx.update(templating.render_data(rule.set_ctx, self.context(
                    reads=reads, args=run.args, extra=extra), step=step.name, field="case.set"))
        except TemplateError as exc:
            self.finish_run(run, ok=False, result=None, error=template_failure(self, step, exc))
            return False
        if rule is not None and rule.do == "fail":
            self.finish_run(run, ok=False, result=None, error={
                "message": f"case rule at line {rule.line} failed the step on step.enter",
                "kind": "case"})
            return False
        return True

    def exit_step(self, step: Step, run: Run, result: JsonValue, route: str | None
                  ) -> tuple[bool, JsonValue, dict[str, Any] | None, str | None]:
        """Case `step.exit` rules on a successful run: the first true one writes ctx, replaces
        the result, picks a route (unless a call rule already did) or fails the run.
        """
        def context() -> dict[str, Any]:
            extra = {"event": {"name": "step.exit", "payload": {"result": result, "error": None}},
                     "result": result, "response": result, "error": None,
                     "this": {"status": "ok", "data": result, "result": result, "error": None}}
            return self.context(reads=rule_templates(step.exit), args=run.args, extra=extra)
        try:
            rule = self.first_rule(step.exit, context(), step)
            if rule is None:
                return True, result, None, route
            if rule.set_ctx:
                self.state.ctx.update(templating.render_data(rule.set_ctx, context(), step=step.name,
                                                        field="case.set"))
            if rule.result is not None:
                result = templating.render_data(rule.result, context(), step=step.name,
                                           field="case.result")
        except TemplateError as exc:
            return False, None, template_failure(self, step, exc), None
        if rule.do == "fail":
            return False, None, {"message": f"case rule at line {rule.line} failed the step on "
                                 "step.exit", "kind": "case"}, None
        return True, result, None, route or rule.route

    def first_rule(self, rules: tuple[Rule, ...], context: dict[str, Any], step: Step) -> Rule | None:
        for rule in rules:
            if templating.evaluate_guard(rule.when, context, step=step.name, field="case.when"):
                return rule
        return None

    def route(self, step: Step, run: Run, ok: bool, error: dict[str, JsonValue] | None,
              extra: Mapping[str, object], route: str | None = None) -> None:
        context = self.context(reads=[[a.when, a.args, a.set_ctx] for a in step.next.arcs],
                               args=run.args, extra=extra)
        selected = self.select_arcs(step, ok, route, context)
        if not ok and not selected:
            self.fail_execution(step.name, {**(error or {}), "step": step.name})
            return
        tokens = []
        for arc in selected:
            args = templating.render_data(arc.args, context, step=step.name, field="next.arcs.args")
            if arc.set_ctx:
                self.state.ctx.update(templating.render_data(arc.set_ctx, context, step=step.name,
                                                        field="next.arcs.set"))
            tokens.append((arc, args))
        case_events.next_evaluated(self, step, run, route, tokens)
        chosen = {a.step for a in selected}
        # A token that stays in a cycle (pagination, retry loop) means this step runs again and
        # decides its other arcs then; ruling them out now would let a join downstream fire early.
        if not any(self.graph.stays_in_cycle(step.name, a.step) for a in selected):
            for arc in step.next.arcs:
                if arc.step not in chosen:
                    self.rule_out(step.name, arc.step)
        for arc, args in tokens:
            if self.state.status != "running":
                continue
            if arc.delay:
                self.delay(step.name, arc.step, args, arc.delay)
            else:
                self.deliver(step.name, arc.step, args)

    def select_arcs(self, step: Step, ok: bool, route: str | None,
                    context: dict[str, Any]) -> list[Arc]:
        """The arcs the outcome takes: the first true one of an exclusive `next`, every true one
        otherwise; a route chosen by a case rule fires all of its arcs.
        """
        # Otherwise the arcs without a route (the structural `next`) are evaluated as usual.
        candidates = [arc for arc in step.next.arcs if arc.route == route]
        if not ok:
            # A failure is handed on only by guards written for failures (dsl/guards.py);
            # an arc that is true for another reason must not carry a failed step onwards.
            candidates = [arc for arc in candidates if guards.reads_failure(arc.when)]
        exclusive = step.next.mode == "exclusive" and route is None
        selected: list[Arc] = []
        for arc in candidates:
            if exclusive and selected:
                break
            fires = ok if arc.when is None else templating.evaluate_guard(
                arc.when, context, step=step.name, field="next.arcs.when")
            if fires:
                selected.append(arc)
        return selected

    def delay(self, src: str, dst: str, args: dict[str, JsonValue], seconds: float) -> None:
        """A token on a delayed arc: held in the state, delivered when its durable timer fires."""
        self.state.delays_set += 1
        # A dot: no listener timer has this name.
        timer_id = f"{DELAY_TIMER_PREFIX}{self.state.delays_set}"
        fire_at = self.now + seconds
        self.state.delayed[timer_id] = Delayed(src=src, dst=dst, args=args, fire_at=fire_at)
        body = {"event_type": "timer.fired", "execution_id": self.state.execution_id, "step": src,
                "timer_id": timer_id, "fire_at": fire_at, "set_at": self.now,
                "data": {"timer_id": timer_id, "name": timer_id, "step": src, "to": dst}}
        self.state.outbox.append(Outgoing("timer", ids.event_msg_id(self.state.execution_id, "timer",
                                                                timer_id),
                                      body, event_type="timer.fired"))

    def on_delay_timer(self, timer_id: str) -> None:
        """The timer of a delayed token fired: the token reaches its step now."""
        token = self.state.delayed.pop(timer_id, None)
        if token is not None:  # None: a redelivered timer, already applied
            self.deliver(token.src, token.dst, token.args)

    def fail_execution(self, step: str, error: dict[str, JsonValue]) -> None:
        if self.state.status != "running":
            return
        message = error.get("message") or "step failed"
        self.state.status = "failed"
        self.state.error = {**error, "step": step, "message": f'step "{step}" failed: {message}'}

    def check_quiescence(self) -> None:
        """Called once at the end of start/apply: decide whether the execution has ended."""
        if self.state.status == "running":
            # Nothing runs: a join still waiting can get no further token, so it fires with what
            # it has (or dies). Repeat until the marking is stable.
            while (self.state.joins and not self.state.active_runs and not self.state.delayed
                   and self.state.status == "running"):
                step = sorted(self.state.joins)[0]
                join = self.state.joins.pop(step)
                if any(join.arrived.values()):
                    self.fire(step, join.args)
                else:
                    self.mark_dead(step)
            if (self.state.active_runs or self.state.delayed or admission.waiting(self.state)) \
                    and self.state.status == "running":
                return
            if self.state.status == "running":
                self.state.status = "completed"
        if self.state.ended_at is None:
            self.state.ended_at = self.now
        etype = f"execution.{self.state.status}"
        # A restarted execution ends again: its end event needs an id of its own.
        again = (self.state.restarts,) if self.state.restarts else ()
        self.emit(etype, ids.event_msg_id(self.state.execution_id, etype, *again),
                  **self.state.summary(), **({"restart": again[0]} if again else {}),
                  duration_ms=round((self.state.ended_at - self.state.started_at) * 1000, 3))
        admission.released(self)
        # A failure elsewhere ends the execution while these runs still wait on children that
        # nobody will read any more.
        for run in self.state.active_runs:
            children.cancel_run(self, run, f"its parent {self.state.execution_id} "
                                           f"{self.state.status}")
        self.state.runs.clear()
        self.state.joins.clear()
        self.state.delayed.clear()


def start(playbook: Playbook, *, execution_id: str, playbook_key: str, workload: dict[str, Any],
          now: float, parent_execution_id: str | None = None,
          parent_iter: dict[str, Any] | None = None, concurrency: Mapping[str, Any] | None = None,
          labels: Mapping[str, str] | None = None, playbook_file: str | None = None) -> ExecutionState:
    """A new execution: a token at the start step, or in line for a slot under a concurrency
    limit (router/admission.py). Returns the state with its outbox filled.
    """
    state = ExecutionState(execution_id=execution_id, playbook_key=playbook_key, workload=workload,
                           playbook_path=playbook.path, playbook_name=playbook.name,
                           parent_execution_id=parent_execution_id, parent_iter=parent_iter,
                           started_at=now, labels=dict(labels or {}), playbook_file=playbook_file)
    engine = Engine(playbook, state, now)
    held = admission.hold(engine, concurrency)
    engine.emit("execution.started", ids.event_msg_id(execution_id, "execution.started"),
                playbook=playbook.name, path=playbook.path, file=playbook_file, workload=workload, **held,
                **({"labels": dict(state.labels)} if state.labels else {}))
    admission.begin(engine)  # fires the start step unless it waits for a slot
    engine.check_quiescence()
    return state


def abort(playbook: Playbook, state: ExecutionState, cause: str, error: dict[str, JsonValue],
          now: float) -> ExecutionState:
    """End a running execution as failed because `cause` (an event, or its start) could not be
    applied or its effects could not be stored; `error` says why (`message`, `kind`, and where
    known `event` and `step`). The outbox holds only what the failure implies: `execution.failed`,
    and cancels of the children its runs still waited on.
    """
    state.outbox = []
    if state.status != "running":
        return state
    state.status = "failed"
    state.error = {**error, "message": f"{cause} could not be applied: {error.get('message')}"}
    Engine(playbook, state, now).check_quiescence()
    return state


def apply(playbook: Playbook, state: ExecutionState, event: RouterEvent,
          now: float) -> Decision:
    """Apply one event (an outcome, a signal, a timer, a cancel request, a child's start); the
    decision's outbox (also `state.outbox`) holds only the messages this event implies.
    """
    state.outbox = []
    if isinstance(event, ChildStarted):
        # Even for a finished execution: a child that started after its parent gave up on it
        # must still be cancelled.
        if state.status == "running":
            state.applied += 1
        children.on_started(Engine(playbook, state, now), event)
        return Decision(state, state.outbox)
    if isinstance(event, (RestartRequested, Replayed)):
        # A restart reopens a finished execution, so it is taken whatever the status.
        state.applied += 1
        engine = Engine(playbook, state, now)
        restart.apply_any_status(engine, event)
        if state.status == "running":
            engine.check_quiescence()
        return Decision(state, state.outbox)
    if state.status != "running":
        return Decision(state, state.outbox)  # late outcomes, timers, repeated cancels
    engine = Engine(playbook, state, now)
    state.applied += 1
    heard_by = listeners.listening(playbook, state)
    if _handled(engine, event):
        listeners.hear_all(engine, heard_by, event)
    engine.check_quiescence()
    return Decision(state, state.outbox)


def _handled(engine: Engine, event: RouterEvent) -> bool:
    """What the event does; the answer says whether the listeners hear it too. Signals,
    listener timers and any other type: only listeners act on them.
    """
    if isinstance(event, OutcomeEvent):
        return _on_outcome(engine, event)
    if isinstance(event, CancelRequested):
        cancel.apply_cancel(engine, event)
        return False
    if isinstance(event, ExecutionAdmitted):
        return admission.on_admitted(engine, event)
    if isinstance(event, TimerFired):
        return _on_timer(engine, event)
    return True


def foreign_pool(playbook: Playbook, state: ExecutionState, event: RouterEvent) -> str | None:
    """The pool a running step's command was sent to, when this outcome came from another
    (None when it may be applied: from that pool, or for a run no longer running, which
    on_outcome passes over). The event's pool is its subject's, which NATS lets only that
    pool's workers publish.
    """
    if not isinstance(event, OutcomeEvent):
        return None
    run = state.runs.get(event.step_run_id)
    if run is None or run.status != "running":
        return None
    expected = playbook.step(run.step).pool or DEFAULT_POOL
    return None if event.pool == expected else expected


def _on_outcome(engine: Engine, event: OutcomeEvent) -> bool:
    """A worker's outcome; one from another pool than its command's is dropped unheard."""
    if foreign_pool(engine.pb, engine.state, event) is not None:
        return False
    engine.on_outcome(event)
    return True


def _on_timer(engine: Engine, event: TimerFired) -> bool:
    """A delayed token's timer (`next.spec.delay`), a watchdog's, or else a listener's."""
    if event.timer_id.startswith(DELAY_TIMER_PREFIX):
        engine.on_delay_timer(event.timer_id)
        return False
    if watchdog.is_watchdog(event):
        watchdog.on_fired(engine, event)
        return False
    return True
