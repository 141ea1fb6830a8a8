"""Run one command's task pipeline: render, call the tool, apply the task policy (spec 002 §5.4).

Directives: continue (next task), retry (same task, attempt+1, bounded by `attempts`, with backoff),
jump (to a named task), break (stop, success), fail (stop, failure). Without policy rules an ok
outcome continues and an error fails; with rules and no match, an error still fails (spec 002
says continue, but silently passing an error on is never what a playbook author means).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from noetl_stream.dsl import templating
from noetl_stream.dsl.models import Rule, Task
from noetl_stream.errors import KeychainError, NoetlStreamError, TemplateError
from noetl_stream.router.context import build_context, step_view
from noetl_stream.runtime.keychain import KeychainResolver
from noetl_stream.runtime.redact import secret_values
from noetl_stream.tools.base import Outcome, TaskCall
from noetl_stream.tools.registry import ToolRegistry

MAX_STEPS_PER_PIPELINE = 100_000  # a jump loop that never ends is a bug; stop it with a reason


@dataclass
class PipelineResult:
    ok: bool
    result: Any = None
    error: dict[str, Any] | None = None
    ctx_patch: dict[str, Any] = field(default_factory=dict)
    http: dict[str, Any] | None = None
    tasks_run: int = 0
    route: str | None = None  # set by a case rule with `next`: only the step's arcs with it fire


def backoff_delay(rule: Rule, attempt: int) -> float:
    """Wait before attempt `attempt + 1`; `delay` is the first wait (ARCHITECTURE §8 decisions)."""
    if rule.backoff == "exponential":
        wait = rule.delay * ((rule.multiplier or 2.0) ** (attempt - 1))
    elif rule.backoff == "linear":
        wait = rule.delay * attempt
    elif rule.backoff == "none":
        wait = 0.0
    else:
        wait = rule.delay
    return float(min(wait, rule.max_delay) if rule.max_delay is not None else wait)


def outcome_views(task: Task, outcome: Outcome) -> dict[str, Any]:
    """`output` (NoETL today) and `outcome` (spec 002/003) as templates read them."""
    # NoETL reads `output` both as the envelope (`output.status`, `output.data`) and as the result
    # itself (`{{ output }}['count']`): the result's keys are there too, the envelope's win.
    output = dict(outcome.result) if isinstance(outcome.result, dict) else {}
    pg = (outcome.error or {}).get("pg")  # postgres errors: {sqlstate, message, ...}
    output.update({"status": outcome.status, "data": outcome.result, "response": outcome.result,
                   "error": outcome.error, "http": outcome.http, "pg": pg})
    result = outcome.result
    if task.kind == "http" and outcome.http is not None:
        result = {"status_code": outcome.http["status"], "headers": outcome.http["headers"],
                  "data": outcome.result}
    return {"output": output,
            "outcome": {"status": outcome.status, "result": result, "error": outcome.error,
                        "http": outcome.http, "pg": pg, "meta": outcome.meta}}


def case_views(outcome: Outcome) -> dict[str, Any]:
    """`response` and `this` as case rules read them (ARCHITECTURE §8): `response` is the parsed
    body (an error reply's too), and `response.status_code` falls back to the HTTP status.
    """
    error = outcome.error or {}
    response = outcome.result if outcome.result is not None else error.get("body")
    if isinstance(response, dict) and outcome.http is not None:
        response = {"status_code": outcome.http.get("status"), **response}
    this = {"status": outcome.status, "data": outcome.result, "result": outcome.result,
            "error": outcome.error, "meta": outcome.meta}
    return {"response": response, "this": this}


def merge_config(config: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """`override` deep-merged over `config` (a case `call` changes only the fields it names)."""
    out = dict(config)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge_config(out[key], value)
        else:
            out[key] = value
    return out


class Pipeline:
    def __init__(self, command: dict[str, Any], tools: ToolRegistry,
                 idempotency_prefix: str, keychain: KeychainResolver | None = None) -> None:
        self.cmd = command
        self.keychain_resolver = keychain
        self.keychain: dict[str, Any] = {}  # resolved entries, read as `keychain.<name>`
        self.tools = tools
        self.key_prefix = idempotency_prefix
        ctx_in = command["context"]
        self.tasks = [Task.model_validate(t) for t in command["tasks"]]
        self.index = {t.name: i for i, t in enumerate(self.tasks)}
        self.workload: dict[str, Any] = ctx_in.get("workload", {})
        self.ctx: dict[str, Any] = dict(ctx_in.get("ctx", {}))
        self.iter: dict[str, Any] = dict(ctx_in.get("iter", {}))
        self.vars: dict[str, Any] = ctx_in.get("vars", {})
        http = ctx_in.get("steps_http", {})
        loops = set(ctx_in.get("steps_loop", ()))
        self.steps = {n: step_view(r, http.get(n), n in loops)
                      for n, r in ctx_in.get("steps", {}).items()}
        self.token_args: dict[str, Any] = ctx_in.get("args", {})
        self.args: dict[str, Any] = dict(self.token_args)
        self.locals: dict[str, Any] = {}
        self.ctx_patch: dict[str, Any] = {}
        self.overrides: dict[str, dict[str, Any]] = {}  # task -> config from a case `call`
        self.route: str | None = None
        self.secrets: set[str] = set()  # values tools marked secret; the worker masks them
        self.step = command["step"]

    def context(self, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        return build_context(workload=self.workload, ctx=self.ctx, args=self.args,
                             iter_vars=self.iter, vars_=self.vars, steps=self.steps,
                             execution_id=self.cmd["execution_id"],
                             extra={**self.locals, **(extra or {}), "keychain": self.keychain})

    async def run(self) -> PipelineResult:
        try:
            await self._resolve_keychain()
            step_args = self.cmd.get("step_args") or {}
            if step_args:
                rendered = templating.render(step_args, self.context(), step=self.step, field="input")
                self.args = {**self.token_args, **rendered}
            return await self._run_tasks()
        except TemplateError as exc:
            return PipelineResult(False, error={"message": str(exc), "kind": "template"},
                                  ctx_patch=self.ctx_patch)
        except KeychainError as exc:
            return PipelineResult(False, error={"message": str(exc), "kind": "keychain",
                                                "entry": exc.entry})

    async def _resolve_keychain(self) -> None:
        declarations = self.cmd.get("keychain") or []
        if not declarations:
            return
        if self.keychain_resolver is None:
            raise KeychainError(str(declarations[0].get("name")), "this worker cannot resolve "
                                "keychain entries")
        resolved = await self.keychain_resolver.resolve(
            declarations, self.context(), execution_id=self.cmd["execution_id"])
        self.keychain = resolved.values
        self.secrets.update(resolved.secrets)

    async def _run_tasks(self) -> PipelineResult:
        pc = 0
        attempt = 1
        prev: Any = None
        last: Outcome | None = None
        executed = 0
        while pc < len(self.tasks):
            executed += 1
            if executed > MAX_STEPS_PER_PIPELINE:
                return self._failed(f"pipeline ran {MAX_STEPS_PER_PIPELINE} tasks without ending; "
                                    "a jump loop never stops", "pipeline", last)
            task = self.tasks[pc]
            outcome = await self._call(task, attempt, prev)
            last = outcome
            views = outcome_views(task, outcome)
            extra = {**views, **case_views(outcome), "_prev": prev, "_task": task.name,
                     "_attempt": attempt, "result": outcome.result, "error": outcome.error}
            rule = self._match(task, extra, outcome.ok)
            do = rule.do if rule is not None else ("continue" if outcome.ok else "fail")
            if do == "retry":
                assert rule is not None
                if attempt < rule.attempts:
                    await asyncio.sleep(backoff_delay(rule, attempt))
                    attempt += 1
                    continue
                do = "continue" if outcome.ok else "fail"
            if do == "fail":
                return self._failed(self._error_message(task, outcome), "task", outcome, task)
            self._apply_writes(task, rule, extra)
            value = outcome.result
            if rule is not None:
                value = self._apply_case(task, rule, extra, value)
            prev = value
            self.locals[task.name] = value
            attempt = 1
            if do == "break":
                break
            if do == "jump":
                assert rule is not None and rule.to is not None
                pc = self.index[rule.to]
                continue
            pc += 1
        assert last is not None
        return PipelineResult(True, result=prev, ctx_patch=self.ctx_patch, http=last.http,
                              tasks_run=executed, route=self.route)

    async def _call(self, task: Task, attempt: int, prev: Any) -> Outcome:
        extra = {"_prev": prev, "_task": task.name, "_attempt": attempt}
        context = self.context(extra)
        try:
            config = {k: (v if k == "code" else templating.render(v, context, step=self.step,
                                                                 field=f"tool.{k}"))
                      for k, v in task.config.items()}
            if task.name in self.overrides:
                config = merge_config(config, self.overrides[task.name])
            inputs = templating.render(task.input, context, step=self.step, field="tool.input")
        except TemplateError as exc:
            return Outcome.failure(str(exc), "template")
        if task.kind == "python":
            inputs = {**self.args, **inputs}
        call = TaskCall(
            execution_id=self.cmd["execution_id"], step=self.step, task=task.name, kind=task.kind,
            config=config, input=inputs, spec=task.spec,
            idempotency_key=f"{self.key_prefix}:{task.name}:{attempt}", attempt=attempt,
            timeout_s=self.cmd.get("timeout_s"))
        try:
            outcome = await self.tools.get(task.kind).run(call)
        except NoetlStreamError as exc:
            return Outcome.failure(str(exc), "tool")
        self.secrets.update(secret_values(outcome))
        return outcome

    def _match(self, task: Task, extra: dict[str, Any], ok: bool) -> Rule | None:
        if not task.rules:
            return None
        context = self.context(extra)
        for rule in task.rules:
            if rule.event == "call.error" and ok:
                continue
            guard_context = context
            field = f"tool.{task.name}.spec.policy.when"
            if rule.event is not None:  # a case rule: its guard reads event.name
                guard_context = {**context, "event": {"name": rule.event, "payload": {
                    "result": extra["result"], "error": extra["error"]}}}
                field = "case.when"
            if templating.evaluate_guard(rule.when, guard_context, step=self.step, field=field):
                return rule
        return None

    def _apply_case(self, task: Task, rule: Rule, extra: dict[str, Any], value: Any) -> Any:
        """A case rule's `call` overrides, `route` and `result`; returns the task's result."""
        if rule.route is not None:
            self.route = rule.route
        if not (rule.call or rule.result is not None):
            return value
        context = self.context(extra)
        if rule.call:
            rendered = templating.render(rule.call, context, step=self.step, field="case.call")
            self.overrides[task.name] = merge_config(self.overrides.get(task.name, {}), rendered)
        if rule.result is not None:
            value = templating.render(rule.result, context, step=self.step, field="case.result")
        return value

    def _apply_writes(self, task: Task, rule: Rule | None, extra: dict[str, Any]) -> None:
        groups = [(rule.set_iter, rule.set_ctx, rule.set_locals)] if rule is not None else []
        groups.append((task.set_iter, task.set_ctx, task.set_locals))
        for set_iter, set_ctx, set_locals in groups:
            if not (set_iter or set_ctx or set_locals):
                continue
            context = self.context(extra)
            self.iter.update(templating.render(set_iter, context, step=self.step, field="set_iter"))
            written = templating.render(set_ctx, context, step=self.step, field="set_ctx")
            self.ctx.update(written)
            self.ctx_patch.update(written)
            self.locals.update(templating.render(set_locals, context, step=self.step, field="set"))

    def _error_message(self, task: Task, outcome: Outcome) -> str:
        message = (outcome.error or {}).get("message", "task failed")
        return f'task "{task.name}" ({task.kind}) failed: {message}'

    def _failed(self, message: str, kind: str, outcome: Outcome | None,
                task: Task | None = None) -> PipelineResult:
        error = dict(outcome.error or {}) if outcome is not None else {}
        error.update({"message": message, "kind": error.get("kind", kind)})
        if task is not None:
            error["task"] = task.name
        return PipelineResult(False, error=error, ctx_patch=self.ctx_patch,
                              http=outcome.http if outcome else None)
