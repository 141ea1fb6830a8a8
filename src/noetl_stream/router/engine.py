"""Router rules (ARCHITECTURE §7): tokens, admission, arcs, joins with dead-path elimination,
back-edges, loops, failure routing, completion. Deterministic: the same state and event always
yield the same state and outbox.

`apply` works on the state it is given and returns it; callers that need the old state keep a
copy (`ExecutionState.from_dict(state.to_dict())`).
"""

from __future__ import annotations

from typing import Any

from noetl_stream import ids, jsonutil, messages, refs
from noetl_stream.dsl import guards, keychain, pycode, templating
from noetl_stream.dsl.models import Arc, Playbook, Rule, Step, Task
from noetl_stream.errors import TemplateError
from noetl_stream.router import cancel, case_events, children, listeners, loops, watchdog
from noetl_stream.router.context import build_context, output_view, pick_steps
from noetl_stream.router.graph import graph_of
from noetl_stream.router.state import Delayed, ExecutionState, Join, Outgoing, Run

DEFAULT_POOL = "default"
PROGRESS_EVENTS = frozenset({"step.started", "step.skipped", "loop.started", "loop.progress",
                             *case_events.EVENTS})


class _Router:
    def __init__(self, playbook: Playbook, state: ExecutionState, now: float) -> None:
        self.pb = playbook
        self.s = state
        self.now = now
        self.graph = graph_of(playbook)
        self.names = playbook.step_index  # membership only: steps by name, built once
        self.case_matched: list[str] = []  # spec 001: branches the current outcome found true

    # -- messages --------------------------------------------------------------------------
    def emit(self, event_type: str, msg_id: str, **payload: Any) -> None:
        """Queue an event; the ones only watchers read go out without waiting for a store ack."""
        body = {"event_id": msg_id, **messages.event_body(
            event_type, self.s.execution_id, self.now,
            parent_execution_id=self.s.parent_execution_id), **payload}
        self.s.outbox.append(Outgoing("event", msg_id, body, event_type=event_type,
                                      progress=event_type in PROGRESS_EVENTS))

    def context(self, *, args: dict[str, Any] | None = None, names: set[str] | None = None,
                extra: dict[str, Any] | None = None) -> dict[str, Any]:
        steps = pick_steps(names if names is not None else self.s.steps.keys(), self.s.steps)
        return build_context(workload=self.s.workload, ctx=self.s.ctx, args=args, vars_=self.s.vars,
                             iter_vars=self.inherited_iter(), steps=steps,
                             execution_id=self.s.execution_id, extra=extra)

    def inherited_iter(self) -> dict[str, Any]:
        """`iter` outside the step's own loop: the parent's iteration of a child execution
        (spec 002 §6.4), so `iter.parent.<name>` reads the item the parent loop is on.
        """
        return {"parent": self.s.parent_iter} if self.s.parent_iter is not None else {}

    # -- tokens ----------------------------------------------------------------------------
    def deliver(self, src: str | None, dst: str, args: dict[str, Any]) -> None:
        """A token from `src` (None for the start) reaches `dst`."""
        if dst not in self.names:
            return  # an arc to an implicit `end` simply ends the branch
        if src is not None and self.graph.is_join(dst) and not self.graph.is_back_edge(src, dst):
            join = self.s.joins.setdefault(dst, Join())
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
            join = self.s.joins.setdefault(dst, Join())
            join.arrived.setdefault(src, False)
            self.try_join(dst)
            return
        self.mark_dead(dst)

    def try_join(self, step: str) -> None:
        join = self.s.joins[step]
        preds = self.graph.forward_preds[step]
        if not all(p in join.arrived for p in preds):
            return
        del self.s.joins[step]
        if any(join.arrived.values()):
            self.fire(step, join.args)
        else:
            self.mark_dead(step)

    def mark_dead(self, step: str) -> None:
        rec = self.s.record(step)
        if rec.runs == 0 and rec.status == "pending":
            rec.status = "skipped"
        for arc in self.pb.step(step).next.arcs:
            self.rule_out(step, arc.step)

    # -- firing ----------------------------------------------------------------------------
    def fire(self, name: str, args: dict[str, Any]) -> None:
        step = self.pb.step(name)
        if step.admit and not self.admitted(step, args):
            rec = self.s.record(name)
            if rec.runs == 0:
                rec.status = "skipped"
            self.emit("step.skipped", ids.event_msg_id(self.s.execution_id, "step.skipped", name,
                                                        rec.runs), step=name, reason="admission")
            for arc in step.next.arcs:
                self.rule_out(name, arc.step)
            return
        rec = self.s.record(name)
        rec.runs += 1
        rec.status = "running"
        run_id = ids.step_run_id(self.s.execution_id, name, rec.runs)
        run = Run(run_id=run_id, step=name, run_no=rec.runs, args=dict(args), issued_at=self.now)
        self.s.runs[run_id] = run
        self.emit("step.started", ids.event_msg_id(self.s.execution_id, "step.started", run_id),
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

    def admitted(self, step: Step, args: dict[str, Any]) -> bool:
        # Admission happens as the step is entered: a case `skip` on step.enter is a rule here.
        context = self.context(args=args, extra={"event": {"name": "step.enter", "payload": {}}})
        for rule in step.admit:
            try:
                if templating.evaluate_guard(rule.when, context, step=step.name,
                                             field="spec.policy.admit"):
                    return rule.allow
            except TemplateError:
                return False
        return True

    def command(self, step: Step, run: Run, index: int | None, item: Any) -> None:
        names = step_reads(step) | keychain.reads(self.pb.keychain)
        if reads_context(step):  # python code reading `context` may read any of it
            names |= {"workload", "ctx", *self.s.steps}
        iter_vars = self.inherited_iter()
        if index is not None and step.loop is not None:
            iter_vars = {**iter_vars, **loops.iteration_vars(step.loop, index, item)}
        steps = pick_steps(names, self.s.steps)
        http = {n: self.s.steps[n].http for n in steps if self.s.steps[n].http}
        loop_steps = [n for n in steps if self.s.steps[n].loop]
        body = messages.command_body(
            execution_id=self.s.execution_id,
            playbook=self.pb.path or self.pb.name,  # for metrics and traces
            step=step.name,
            step_run_id=run.run_id,
            parent_execution_id=self.s.parent_execution_id,
            iteration=index,
            tasks=[t.model_dump(mode="json") for t in step.tasks],
            step_args=step.args,
            context={
                "workload": _only(self.s.workload, names, "workload"),
                "ctx": _only(self.s.ctx, names, "ctx"),
                "args": run.args,
                "iter": iter_vars,
                "vars": self.s.vars,
                "steps": {n: self.s.steps[n].result for n in steps},
                "steps_http": http,
                "steps_loop": loop_steps,
            },
            keychain=keychain.for_command(
                self.pb.keychain, names,
                first=run.run_no == 1 and step.name == self.pb.start_step.name),
            max_payload_bytes=refs.max_payload_bytes(self.pb.executor),
            **loops.command_fields(step))
        kind = step.tasks[0].kind if len(step.tasks) == 1 else "pipeline"
        self.s.outbox.append(Outgoing("command", ids.command_msg_id(run.run_id, index), body,
                                      pool=step.pool or DEFAULT_POOL, tool_kind=kind))
        watchdog.arm(self, step, run, index)

    # -- outcomes --------------------------------------------------------------------------
    def on_outcome(self, event: dict[str, Any]) -> None:
        run = self.s.runs.get(str(event.get("step_run_id")))
        if run is None or run.status != "running":
            return  # a duplicate or late outcome: already applied
        etype = event["event_type"]
        ok = etype in ("step.done", "loop.iteration.done")
        index = event.get("iteration")
        if index is not None and (not isinstance(index, int) or isinstance(index, bool)):
            return  # not an iteration number (True == 1 would match iteration 1)
        error = _error_of(event.get("error"))
        if ok and (index is None) == (run.loop is None) and (
                run.loop is None or index in run.loop.in_flight):
            case_events.evaluated(self, self.pb.step(run.step), run, event)
        if run.loop is None:
            if index is not None:
                return
            self.patch_ctx(ok, event)
            rec = self.s.record(run.step)
            http = event.get("http")
            rec.http = http if isinstance(http, dict) else None
            self.finish_run(run, ok=ok, result=event.get("result"), error=error,
                            route=_route_of(event) if ok else None)
            return
        if index is not None and index in run.loop.in_flight:
            loops.on_outcome(self, run, index, ok, event, error)

    def patch_ctx(self, ok: bool, event: dict[str, Any]) -> None:
        patch = event.get("ctx_patch")
        if ok and isinstance(patch, dict):
            self.s.ctx.update(patch)

    def finish_run(self, run: Run, *, ok: bool, result: Any, error: dict[str, Any] | None,
                   route: str | None = None) -> None:
        step = self.pb.step(run.step)
        if ok and step.exit:
            ok, result, error, route = self.exit_step(step, run, result, route)
        run.status = "done" if ok else "failed"
        run.loop = None  # iteration bookkeeping is no longer needed; keep snapshots small
        rec = self.s.record(run.step)
        rec.status = "completed" if ok else "failed"
        rec.result = result
        rec.error = error
        rec.loop = step.loop is not None
        if ok:
            event_name = "loop.done" if step.loop is not None else "step.done"
            self.s.result = result
        else:
            event_name = "step.failed"
        if step.loop is not None or not ok:
            # The worker reported step.done itself; loop.done and failures of loops are ours.
            etype = "loop.done" if ok else "loop.failed" if step.loop is not None else ""
            if etype:
                self.emit(etype, ids.event_msg_id(self.s.execution_id, etype, run.run_id),
                          step=run.step, step_run_id=run.run_id, status="ok" if ok else "error",
                          error=error)
        context_extra = {"event": {"name": event_name, "payload": {"result": result, "error": error}},
                         "result": result, "error": error,
                         "output": output_view(result, error, rec.http, loop=rec.loop)}
        try:
            if ok:
                self.apply_step_writes(step, run, context_extra)
            self.route(step, run, ok, error, context_extra, route)
        except TemplateError as exc:
            error = {"message": str(exc), "kind": "template"}
            if ok:  # its `set:`/`vars:` or arcs failed: the step did not complete after all
                rec.status, rec.error = "failed", error
            self.fail_execution(run.step, error)
        self.s.runs.pop(run.run_id, None)

    def apply_step_writes(self, step: Step, run: Run, extra: dict[str, Any]) -> None:
        if step.set_ctx:
            context = self.context(args=run.args, extra=extra)
            values = templating.render(step.set_ctx, context, step=step.name, field="set")
            for key in sorted(values):
                problem = jsonutil.storable_problem(values[key])
                if problem is not None:
                    raise TemplateError(f"the value cannot be stored: {problem}",
                                        expression=str(step.set_ctx.get(key)), step=step.name,
                                        field=f"set.{key}")
            self.s.ctx.update(values)
        if step.vars:
            context = self.context(args=run.args, extra=extra)
            self.s.vars.update(templating.render(step.vars, context, step=step.name, field="vars"))

    def enter_step(self, step: Step, run: Run) -> bool:
        """Case `step.enter` rules: the first true one writes ctx or fails the run (False)."""
        extra = {"event": {"name": "step.enter", "payload": {}}}
        try:
            rule = self.first_rule(step.enter, self.context(args=run.args, extra=extra), step)
            if rule is not None and rule.set_ctx:
                self.s.ctx.update(templating.render(rule.set_ctx, self.context(
                    args=run.args, extra=extra), step=step.name, field="case.set"))
        except TemplateError as exc:
            self.finish_run(run, ok=False, result=None, error={"message": str(exc), "kind": "template"})
            return False
        if rule is not None and rule.do == "fail":
            self.finish_run(run, ok=False, result=None, error={
                "message": f"case rule at line {rule.line} failed the step on step.enter",
                "kind": "case"})
            return False
        return True

    def exit_step(self, step: Step, run: Run, result: Any, route: str | None
                  ) -> tuple[bool, Any, dict[str, Any] | None, str | None]:
        """Case `step.exit` rules on a successful run: the first true one writes ctx, replaces
        the result, picks a route (unless a call rule already did) or fails the run.
        """
        def extra() -> dict[str, Any]:
            return {"event": {"name": "step.exit", "payload": {"result": result, "error": None}},
                    "result": result, "response": result, "error": None,
                    "this": {"status": "ok", "data": result, "result": result, "error": None}}
        try:
            rule = self.first_rule(step.exit, self.context(args=run.args, extra=extra()), step)
            if rule is None:
                return True, result, None, route
            if rule.set_ctx:
                self.s.ctx.update(templating.render(rule.set_ctx, self.context(
                    args=run.args, extra=extra()), step=step.name, field="case.set"))
            if rule.result is not None:
                result = templating.render(rule.result, self.context(args=run.args, extra=extra()),
                                           step=step.name, field="case.result")
        except TemplateError as exc:
            return False, None, {"message": str(exc), "kind": "template"}, None
        if rule.do == "fail":
            return False, None, {"message": f"case rule at line {rule.line} failed the step on "
                                 "step.exit", "kind": "case"}, None
        return True, result, None, route or rule.route

    def first_rule(self, rules: tuple[Rule, ...], context: dict[str, Any], step: Step) -> Rule | None:
        for rule in rules:
            if templating.evaluate_guard(rule.when, context, step=step.name, field="case.when"):
                return rule
        return None

    def route(self, step: Step, run: Run, ok: bool, error: dict[str, Any] | None,
              extra: dict[str, Any], route: str | None = None) -> None:
        context = self.context(args=run.args, extra=extra)
        selected: list[Arc] = []
        # A route chosen by a case rule fires all of its arcs; otherwise the arcs without one
        # (the structural `next`) are evaluated as usual.
        candidates = [arc for arc in step.next.arcs if arc.route == route]
        if not ok:
            # A failure is handed on only by guards written for failures (dsl/guards.py);
            # an arc that is true for another reason must not carry a failed step onwards.
            candidates = [arc for arc in candidates if guards.reads_failure(arc.when)]
        exclusive = step.next.mode == "exclusive" and route is None
        for arc in candidates:
            if exclusive and selected:
                break
            fires = ok if arc.when is None else templating.evaluate_guard(
                arc.when, context, step=step.name, field="next.arcs.when")
            if fires:
                selected.append(arc)
        if not ok and not selected:
            self.fail_execution(step.name, {**(error or {}), "step": step.name})
            return
        tokens = []
        for arc in selected:
            args = templating.render(arc.args, context, step=step.name, field="next.arcs.args")
            if arc.set_ctx:
                self.s.ctx.update(templating.render(arc.set_ctx, context, step=step.name,
                                                    field="next.arcs.set"))
            tokens.append((arc.step, args))
        case_events.next_evaluated(self, step, run, route,
                                   [(arc, args) for arc, (_, args) in zip(selected, tokens, strict=True)])
        chosen = {a.step for a in selected}
        # A token that stays in a cycle (pagination, retry loop) means this step runs again and
        # decides its other arcs then; ruling them out now would let a join downstream fire early.
        if not any(self.graph.stays_in_cycle(step.name, a.step) for a in selected):
            for arc in step.next.arcs:
                if arc.step not in chosen:
                    self.rule_out(step.name, arc.step)
        for arc, (dst, args) in zip(selected, tokens, strict=True):
            if self.s.status != "running":
                continue
            if arc.delay:
                self.delay(step.name, dst, args, arc.delay)
            else:
                self.deliver(step.name, dst, args)

    def delay(self, src: str, dst: str, args: dict[str, Any], seconds: float) -> None:
        """A token on a delayed arc: held in the state, delivered when its durable timer fires."""
        self.s.delays_set += 1
        timer_id = f"next.{self.s.delays_set}"  # a dot: no listener timer has this name
        fire_at = self.now + seconds
        self.s.delayed[timer_id] = Delayed(src=src, dst=dst, args=args, fire_at=fire_at)
        body = {"event_type": "timer.fired", "execution_id": self.s.execution_id, "step": src,
                "timer_id": timer_id, "fire_at": fire_at, "set_at": self.now,
                "data": {"timer_id": timer_id, "name": timer_id, "step": src, "to": dst}}
        self.s.outbox.append(Outgoing("timer", ids.event_msg_id(self.s.execution_id, "timer",
                                                                timer_id),
                                      body, event_type="timer.fired"))

    def on_delay_timer(self, timer_id: str) -> None:
        """The timer of a delayed token fired: the token reaches its step now."""
        token = self.s.delayed.pop(timer_id, None)
        if token is not None:  # None: a redelivered timer, already applied
            self.deliver(token.src, token.dst, token.args)

    def fail_execution(self, step: str, error: dict[str, Any]) -> None:
        if self.s.status != "running":
            return
        message = error.get("message") or "step failed"
        self.s.status = "failed"
        self.s.error = {**error, "step": step, "message": f'step "{step}" failed: {message}'}

    def check_quiescence(self) -> None:
        """Called once at the end of start/apply: decide whether the execution has ended."""
        if self.s.status == "running":
            # Nothing runs: a join still waiting can get no further token, so it fires with what
            # it has (or dies). Repeat until the marking is stable.
            while (self.s.joins and not self.s.active_runs and not self.s.delayed
                   and self.s.status == "running"):
                step = sorted(self.s.joins)[0]
                join = self.s.joins.pop(step)
                if any(join.arrived.values()):
                    self.fire(step, join.args)
                else:
                    self.mark_dead(step)
            if (self.s.active_runs or self.s.delayed) and self.s.status == "running":
                return
            if self.s.status == "running":
                self.s.status = "completed"
        if self.s.ended_at is None:
            self.s.ended_at = self.now
        etype = f"execution.{self.s.status}"
        self.emit(etype, ids.event_msg_id(self.s.execution_id, etype), **self.s.summary(),
                  duration_ms=round((self.s.ended_at - self.s.started_at) * 1000, 3))
        # A failure elsewhere ends the execution while these runs still wait on children that
        # nobody will read any more.
        for run in self.s.active_runs:
            children.cancel_run(self, run, f"its parent {self.s.execution_id} "
                                           f"{self.s.status}")
        self.s.runs.clear()
        self.s.joins.clear()
        self.s.delayed.clear()


def step_reads(step: Step) -> set[str]:
    """Names this step's worker-side templates read, to ship only those step results."""
    names: set[str] = templating.referenced_names(step.args) | loops.template_names(step)
    for task in _tasks_and_rule_sinks(step):
        names |= templating.referenced_names(task.config)
        names |= templating.referenced_names(task.input)
        names |= templating.referenced_names([task.set_ctx, task.set_iter, task.set_locals])
        names |= templating.referenced_names(task.sink.when if task.sink else None)
        for rule in task.rules:
            names |= templating.referenced_names([rule.when, rule.set_ctx, rule.set_iter,
                                                  rule.set_locals, rule.call, rule.result])
    return names


def reads_context(step: Step) -> bool:
    """Whether a python task of the step reads `context`, which holds every finished step."""
    return any(t.kind == "python" and isinstance(t.config.get("code"), str)
               and pycode.reads_context(t.config["code"]) for t in _tasks_and_rule_sinks(step))


def _tasks_and_rule_sinks(step: Step) -> tuple[Task, ...]:
    """Every task a command of the step may run: its pipeline and the sinks its rules start."""
    return (*step.tasks, *(sink for task in step.tasks for rule in task.rules for sink in rule.sink))


def _delay_timer(event: dict[str, Any]) -> str:
    """The timer id of a delayed token's `timer.fired`, "" for any other event."""
    timer_id = event.get("timer_id")
    return timer_id if isinstance(timer_id, str) and timer_id.startswith("next.") else ""


def _route_of(event: dict[str, Any]) -> str | None:
    route = event.get("route")
    return route if isinstance(route, str) and route else None


def _error_of(value: Any) -> dict[str, Any] | None:
    """An outcome's error as a mapping; a worker that sent anything else still gets its text shown."""
    if value is None or isinstance(value, dict):
        return value
    return {"message": str(value)}


def _only(scope: dict[str, Any], names: set[str], whole: str) -> dict[str, Any]:
    """The part of `scope` a step reads: all of it when the step names the scope itself (its
    templates may read any key), else just the bare names that resolve into it.
    """
    if whole in names:
        return scope
    return {k: v for k, v in scope.items() if k in names}


def start(playbook: Playbook, *, execution_id: str, playbook_key: str, workload: dict[str, Any],
          now: float, parent_execution_id: str | None = None,
          parent_iter: dict[str, Any] | None = None) -> ExecutionState:
    """A new execution: a token at the start step. Returns the state with its outbox filled."""
    state = ExecutionState(execution_id=execution_id, playbook_key=playbook_key, workload=workload,
                           playbook_path=playbook.path, playbook_name=playbook.name,
                           parent_execution_id=parent_execution_id, parent_iter=parent_iter,
                           started_at=now)
    router = _Router(playbook, state, now)
    router.emit("execution.started", ids.event_msg_id(execution_id, "execution.started"),
                playbook=playbook.name, path=playbook.path, workload=workload)
    router.deliver(None, playbook.start_step.name, {})
    router.check_quiescence()
    return state


def abort(playbook: Playbook, state: ExecutionState, cause: str, error: dict[str, Any],
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
    _Router(playbook, state, now).check_quiescence()
    return state


def cause_of(event: dict[str, Any]) -> str:
    """How an event is named in an error: its type, and the step it reports on."""
    cause = str(event.get("event_type") or "an event")
    step = event.get("step")
    return cause + (f' of step "{step}"' if isinstance(step, str) and step else "")


def apply(playbook: Playbook, state: ExecutionState, event: dict[str, Any],
          now: float) -> ExecutionState:
    """Apply one event (an outcome, a signal, a timer, a cancel request, a child's start);
    `state.outbox` holds only the messages this event implies.
    """
    state.outbox = []
    if event.get("event_type") == children.STARTED:
        # Even for a finished execution: a child that started after its parent gave up on it
        # must still be cancelled.
        if state.status == "running":
            state.applied += 1
        children.on_started(_Router(playbook, state, now), event)
        return state
    if state.status != "running":
        return state  # late outcomes, timers and repeated cancels of a finished execution
    router = _Router(playbook, state, now)
    state.applied += 1
    heard_by = listeners.listening(playbook, state)
    if event.get("event_type") == cancel.REQUESTED:
        cancel.apply_cancel(router, event)
        router.check_quiescence()
        return state
    if event.get("event_type") == "timer.fired" and _delay_timer(event):
        # A delayed token's timer (`next.spec.delay`), not a listener's.
        router.on_delay_timer(_delay_timer(event))
        router.check_quiescence()
        return state
    if watchdog.is_watchdog(event):
        watchdog.on_fired(router, event)
        router.check_quiescence()
        return state
    if event.get("event_type") in ("step.done", "step.failed", "loop.iteration.done",
                                   "loop.iteration.failed"):
        router.on_outcome(event)
    listeners.hear_all(router, heard_by, event)
    router.check_quiescence()
    return state
