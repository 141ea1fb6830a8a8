"""`playbook`: start a child execution of another playbook and, unless `async: true`, wait for it.

Fields: `path` (a catalog path, or a file path such as `./child.yaml` registered with the calling
playbook), `version`, `args`/`input` (the child's payload, deep-merged over its workload),
`async` (return `{execution_id}` once the request is stored), `return_step` (the result of that
child step instead of the child's result). A task inside a loop iteration hands that iteration to
the child, whose templates read it as `iter.parent` (spec 002 §6.4).

A child starts at most once per attempt of the task: its execution id is derived from the task's
idempotency key (parent step run, iteration, task, attempt) and its request carries
`Nats-Msg-Id: req:<child id>`, and the server's `create` of the execution state refuses a second
start after the duplicate window too. A redelivered command therefore finds its child: a finished
one is read from KV `noetl_executions` (its results from beside it), a running one is waited
for. While it waits the worker keeps the command leased with in-progress acks; the wait holds one
of the worker's slots.

A wait that ends without the child's end (the task's timeout, or the router no longer wants the
command because the parent was cancelled or the step's watchdog failed it: the worker cancels the
task with `WITHDRAWN` as the message) asks for the child to be cancelled too. A worker that
merely shuts down leaves the child running: the redelivered command finds it and waits again.
The request names the command (step run, iteration), so the parent's router also cancels a
waited-on child when it cuts that command short, even with no worker left (router/children.py).
"""

from __future__ import annotations

import asyncio
import contextlib

from nats.aio.msg import Msg
from nats.errors import Error as NatsError
from nats.js import JetStreamContext
from nats.js.errors import KeyNotFoundError

from noetl_stream import ids, jsonutil, refs
from noetl_stream.errors import CatalogError
from noetl_stream.jsonutil import JsonObject, JsonValue
from noetl_stream.messages import CancelRequest, ExecutionRequest, split_outcome_pool
from noetl_stream.observe import tracing
from noetl_stream.router.state import ExecutionState
from noetl_stream.state.catalog import resolve_child
from noetl_stream.state.results import ResultStore
from noetl_stream.state.step_results import StepResults
from noetl_stream.tools.base import EventFollower, Outcome, TaskCall, ToolServices
from noetl_stream.tools.nats_patience import patiently

END_EVENTS = frozenset({"execution.completed", "execution.failed", "execution.cancelled",
                        "execution.rejected"})
_PARENT_KEYS_KEPT = 4096
# The message a worker cancels a command's task with when the router no longer wants it (as
# opposed to a worker shutting down, which cancels with none).
WITHDRAWN = "noetl-stream: command withdrawn"


def _flag(value: object) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "yes", "1", "on")
    return bool(value)


class PlaybookTool:
    kind = "playbook"

    def __init__(self, services: ToolServices | None = None) -> None:
        services = services or ToolServices()
        self.nc = services.nats
        self.prefix = services.prefix
        # A worker's requests go on its pool's subjects (server/child_requests.py).
        self._to_pool = f".{services.pool}" if services.pool else ""
        self.follow_events = services.follow_events
        self._parent_keys: dict[str, str | None] = {}  # execution id -> its playbook's catalog key

    async def run(self, call: TaskCall) -> Outcome:
        if self.nc is None or self.follow_events is None:
            return Outcome.failure("the playbook tool needs the worker's NATS connection and "
                                   "event follower", "config")
        path = call.config.get("path")
        payload = _payload(call)
        if not isinstance(path, str) or not path or payload is None:
            return Outcome.failure("playbook task needs `path:`" if payload is not None else
                                   "playbook task field payload must be a mapping", "config")
        version = call.config.get("version")
        version = None if version is None else str(version)
        # NoETL's `return_result: true` waits for the child and returns its result.
        is_async = _flag(call.config.get("async", False)) and \
            not _flag(call.config.get("return_result", False))
        child_id = ids.child_execution_id(call.execution_id, call.idempotency_key)
        js = self.nc.jetstream()
        # Reads and a publish under the child's msg id: safe to make again while a node is away.
        known = await patiently(lambda: self._child_state(js, child_id),
                                what=f"reading child execution {child_id}")
        if known is not None and (is_async or known.get("status") != "running"):
            # Started by an earlier delivery of this command: never start it again.
            if is_async:
                return _started(child_id, path)
            return self._outcome(child_id, await _finished_summary(js, known), call)
        final: asyncio.Future[JsonObject] = asyncio.get_running_loop().create_future()
        feed = None if is_async else await self._follow(child_id, final)
        try:
            if known is None:
                refused = await self._request_start(js, call, child_id, path, version, payload,
                                                    is_async)
                if refused is not None:
                    return refused
            if is_async:
                return _started(child_id, path)
            # NoETL's `timeout:` bounds the wait; else the command's timeout does.
            wait_s = float(call.config["timeout"]) if call.config.get("timeout") else call.timeout_s
            try:
                end = await asyncio.wait_for(asyncio.shield(final), wait_s)
            except TimeoutError:
                await self._cancel_child(js, child_id, call)  # nobody waits for it any more
                return Outcome.failure(f"child execution {child_id} did not finish within "
                                       f"{wait_s:g}s", "timeout", execution_id=child_id)
        except asyncio.CancelledError as exc:
            if exc.args[:1] == (WITHDRAWN,) and not is_async:
                await self._cancel_child(js, child_id, call)
            raise
        finally:
            if feed is not None:
                await feed.stop()
        return self._outcome(child_id, await _with_steps(js, end, call), call)

    async def _request_start(self, js: JetStreamContext, call: TaskCall, child_id: str,
                             path: str, version: str | None, payload: JsonObject,
                             is_async: bool) -> Outcome | None:
        """Publish the child's start request; the failure when its playbook cannot be found."""
        async def resolved() -> tuple[str, str]:
            return await resolve_child(js, parent_key=await self._parent_key(js, call),
                                       path=path, version=version)

        try:
            text, _ = await patiently(resolved, what=f"reading playbook {path}")
        except CatalogError as exc:
            return Outcome.failure(str(exc), "catalog", path=path)
        request = ExecutionRequest(
            execution_id=child_id, playbook=text, playbook_file=path,
            payload=payload, parent_execution_id=call.execution_id,
            parent_iter=call.iteration, parent_step_run_id=call.step_run_id,
            parent_iteration=call.command_iteration, detached=is_async)
        body = request.model_dump_json().encode()
        headers = {"Nats-Msg-Id": ids.request_msg_id(child_id), **tracing.current_headers()}
        await patiently(lambda: js.publish(f"{self.prefix}.requests.execute{self._to_pool}",
                                           body, headers=headers),
                        what=f"starting child execution {child_id}")
        return None

    async def _cancel_child(self, js: JetStreamContext, child_id: str, call: TaskCall) -> None:
        """Ask for the child to be cancelled (the same request `noetl-stream cancel` sends)."""
        request = CancelRequest(execution_id=child_id, requested_by=f"execution {call.execution_id}",
                                reason=f"its parent {call.execution_id} stopped waiting for it "
                                       f"(step {call.step})")
        # Best effort: the parent's cancellation must go on even when NATS is unreachable.
        with contextlib.suppress(NatsError, TimeoutError):
            await js.publish(f"{self.prefix}.requests.cancel{self._to_pool}",
                             request.model_dump_json().encode(),
                             headers={"Nats-Msg-Id": ids.cancel_msg_id(child_id)})

    async def _child_state(self, js: JetStreamContext, child_id: str) -> JsonObject | None:
        kv = await js.key_value("noetl_executions")
        try:
            entry = await kv.get(child_id)
        except KeyNotFoundError:
            return None
        value = jsonutil.loads(entry.value) if entry.value else None
        return value if isinstance(value, dict) else None

    async def _parent_key(self, js: JetStreamContext, call: TaskCall) -> str | None:
        """The calling playbook's catalog key, which holds its file links (read once per execution)."""
        if call.execution_id not in self._parent_keys:
            state = await self._child_state(js, call.execution_id)
            if len(self._parent_keys) >= _PARENT_KEYS_KEPT:
                self._parent_keys.clear()
            key = state.get("playbook_key") if state else None
            self._parent_keys[call.execution_id] = key if isinstance(key, str) else None
        return self._parent_keys[call.execution_id]

    async def _follow(self, child_id: str, final: asyncio.Future[JsonObject]) -> EventFollower:
        """Watch the child's execution events from its first, so an end already stored is seen."""

        async def on_msg(msg: Msg) -> None:
            event = jsonutil.loads_object(msg.data)
            if event is None:
                return
            event.setdefault("event_type", split_outcome_pool(msg.subject.split(".", 3)[-1])[0])
            if event["event_type"] in END_EVENTS and not final.done():
                final.set_result(event)

        # A consumer named by us, re-created if lost: the wait may outlive a NATS node.
        assert self.follow_events is not None  # run() checked it
        feed = self.follow_events(f"{self.prefix}.events.{child_id}.execution.>", on_msg)
        await feed.start()
        return feed

    def _outcome(self, child_id: str, end: JsonObject, call: TaskCall) -> Outcome:
        event_type = end.get("event_type", "")
        status = str(end.get("status")
                     or (event_type.removeprefix("execution.") if isinstance(event_type, str) else ""))
        meta = {"execution_id": child_id}
        if status == "completed":
            result = end.get("result")
            return_step = _returned_step(call)
            if return_step:
                steps = end.get("steps")
                step = steps.get(str(return_step)) if isinstance(steps, dict) else None
                if not isinstance(step, dict):
                    return Outcome.failure(f'child execution {child_id} has no step "{return_step}" '
                                           "to return", "playbook", execution_id=child_id)
                result = step.get("result")
            elif result is None and _flag(call.config.get("return_result", False)):
                result = _latest_result(end.get("steps"))
            return Outcome.success(result, meta=meta)
        if status == "rejected":
            errors = end.get("errors") or []
            listed = errors if isinstance(errors, list) else [errors]
            return Outcome.failure(f"child playbook was rejected: {'; '.join(map(str, listed))}",
                                   "playbook", execution_id=child_id, meta=meta)
        raw_error = end.get("error")
        error: JsonObject = raw_error if isinstance(raw_error, dict) else {}
        message = error.get("message") or f"child execution {status}"
        return Outcome.failure(f"child execution {child_id} {status}: {message}", "playbook",
                               execution_id=child_id, child_error=error, meta=meta)

    async def close(self) -> None:
        return None


def _payload(call: TaskCall) -> JsonObject | None:
    """The child's payload: `args`/`input` when given, else NoETL's `payload:` (its Rust tool lets
    a non-empty `args` win over `payload`); None when `payload` is not a mapping.
    """
    if call.input:
        return dict(call.input)
    payload = call.config.get("payload")
    if payload is None:
        return {}
    return dict(payload) if isinstance(payload, dict) else None


def _returned_step(call: TaskCall) -> str | None:
    """The child step whose result the task returns: `return_step`, or NoETL's `result_step`."""
    step = call.config.get("return_step") or call.config.get("result_step")
    return str(step) if step else None


def _latest_result(steps: JsonValue) -> JsonValue:
    """NoETL's `return_result` without `result_step`: the latest step result that is not null
    (a child ending on a step without a result, a bare `end`, returns what came before it).
    Steps are in the order they first ran.
    """
    if not isinstance(steps, dict):
        return None
    for record in reversed(list(steps.values())):
        if isinstance(record, dict) and record.get("status") == "completed" \
                and record.get("result") is not None:
            return record["result"]
    return None


def _started(child_id: str, path: str) -> Outcome:
    # The shape NoETL's playbook tool answers when it does not wait (tools playbook.rs).
    return Outcome.success({"status": "started", "execution_id": child_id, "path": path,
                            "async": True}, meta={"execution_id": child_id})


async def _finished_summary(js: JetStreamContext, stored: JsonObject) -> JsonObject:
    """A finished child's summary from its committed state, whose results are stored beside it
    (state/step_results.py).
    """
    state = ExecutionState.from_dict(stored)
    await StepResults(js, ResultStore(js)).load(state)
    return state.summary()


async def _with_steps(js: JetStreamContext, end: JsonObject, call: TaskCall) -> JsonObject:
    """The child's end event, with its `steps` read back when a large summary sent them by
    reference and the task returns one of them.
    """
    steps = end.get("steps")
    wants_steps = _returned_step(call) or (_flag(call.config.get("return_result", False))
                                           and end.get("result") is None)
    if wants_steps and refs.is_json_ref(steps):
        return {**end, "steps": await ResultStore(js).resolve(steps)}
    return end
