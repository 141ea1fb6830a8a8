"""A cursor loop iteration's claim, run by the worker before the step's tasks (router/loops.py).

The command carries `cursor: {kind, claim, auth, connection, iterator}`. The claim's templates
render with the same context as the tasks' (workload, ctx, vars, the steps the command carries,
`execution_id`, `iter._index`), plus `__frame_max_rows` = 1 for NoETL claims written as
`LIMIT {{ __frame_max_rows | default(1) }}`: every iteration claims one row. The tool of
`cursor.kind` claims it at most once per iteration (tools/claims.py), keyed by the command's
step run and iteration, so a redelivered command gets back the item it had claimed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from noetl_stream.dsl import templating
from noetl_stream.errors import NoetlStreamError
from noetl_stream.jsonutil import JsonObject, JsonValue
from noetl_stream.messages import Command, CommandCursor
from noetl_stream.tools.base import Claimer, TaskCall
from noetl_stream.tools.registry import ToolRegistry

FIELD = "loop.cursor.claim"
FRAME_MAX_ROWS = 1


@dataclass(frozen=True)
class ClaimResult:
    row: JsonObject | None = None  # None with no error: nothing left to claim
    replayed: bool = False
    error: JsonObject | None = None

    @property
    def report(self) -> JsonObject:
        """What the iteration's outcome event says about its claim (`cursor`)."""
        return {"exhausted": self.error is None and self.row is None, "replayed": self.replayed}


def claim_key(step_run_id: str, iteration: int | None) -> str:
    """One key per iteration of one step run: every delivery of its command shares it."""
    return f"claim:{step_run_id}:{iteration}"


async def claim_item(command: Command, cursor: CommandCursor, tools: ToolRegistry,
                     context: Mapping[str, object]) -> ClaimResult:
    """Claim the iteration's item with the command's `cursor`; template errors raise
    TemplateError (the step's failure).
    """
    step = command.step
    kind = cursor.kind or "postgres"
    scope = {**context, "__frame_max_rows": FRAME_MAX_ROWS}
    config = {"command": templating.render(cursor.claim, scope, step=step, field=FIELD)}
    for name, value in (("auth", cursor.auth), ("connection", cursor.connection)):
        if value is not None:
            config[name] = templating.render(value, scope, step=step, field=f"loop.cursor.{name}")
    try:
        tool = tools.get(kind)
    except NoetlStreamError as exc:
        return _failed(str(exc), "tool")
    if not isinstance(tool, Claimer):
        return _failed(f'tool kind "{kind}" cannot claim items; use kind postgres', "config")
    key = claim_key(command.step_run_id, command.iteration)
    call = TaskCall(execution_id=command.execution_id, step=step, task="cursor.claim",
                    kind=kind, config=config, input={}, spec={}, idempotency_key=key,
                    step_run_id=command.step_run_id, command_iteration=command.iteration)
    outcome = await tool.claim(call, key)
    if not outcome.ok:
        error = dict(outcome.error or {})
        return _failed(str(error.pop("message", "the claim failed")),
                       str(error.pop("kind", "cursor")), **error)
    result = outcome.result if isinstance(outcome.result, dict) else {}
    row = result.get("row")
    return ClaimResult(row=row if isinstance(row, dict) else None,
                       replayed=bool(result.get("replayed")))


def _failed(message: str, kind: str, **fields: JsonValue) -> ClaimResult:
    return ClaimResult(error={**fields, "message": f"{FIELD}: {message}", "kind": kind,
                              "field": FIELD})
