"""Loop steps in the router: starting a loop, keeping its iterations in flight, and folding their
outcomes into the loop's result. Pure, part of the router.

Iterations come from one of two sources (dsl/loops.py):

- a collection (`loop.in`), rendered when the loop starts: iteration i runs item i; a sequential
  loop keeps one iteration in flight, a parallel one up to `max_in_flight`;
- a cursor (`loop.cursor`): `max_in_flight` claiming slots. A slot is one command at a time: the
  worker claims one item, binds it to the iterator and runs the step's tasks on it. A claim that
  finds nothing reports its iteration `exhausted` (a `loop.iteration.done` with
  `cursor.exhausted`), and that slot is not refilled. The loop ends when every slot is exhausted
  and nothing is in flight, or once an iteration failed or chose a route and the ones in flight
  are done.

The router numbers iterations in the order it issues them, so the numbers, and the message ids and
claim keys built from them, are the same on every replay. A loop's result is the results of the
iterations that ran an item, in iteration order (an exhausted claim has no result).
`max_in_flight` may be a template: it is rendered here, once, when the loop starts.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from noetl_stream import ids
from noetl_stream.dsl import template_budget, templating
from noetl_stream.dsl.loops import positive_int
from noetl_stream.dsl.models import LoopSpec, Step
from noetl_stream.errors import TemplateError
from noetl_stream.events import OutcomeEvent
from noetl_stream.jsonutil import JsonValue
from noetl_stream.messages import CommandCursor
from noetl_stream.router import children
from noetl_stream.router.failures import template_failure
from noetl_stream.router.interface import Router
from noetl_stream.router.state import LoopState, Run

DEFAULT_MAX_IN_FLIGHT = 10
CURSOR = "cursor"
LIMIT_FIELD = "loop.spec.max_in_flight"


def start(router: Router, step: Step, run: Run) -> None:
    """The loop step fired: work out its iterations and issue the first ones."""
    spec = step.loop
    assert spec is not None
    limit, problem = _limit(router, step, spec, run.args)
    if problem is not None:
        router.finish_run(run, ok=False, result=None, error=problem)
        return
    items: list[Any] = []
    if spec.mode != CURSOR:
        collected = _collection(router, step, spec, run)
        if collected is None:
            return
        items = collected
    run.loop = LoopState(items=items, mode=spec.mode, max_in_flight=limit)
    router.emit("loop.started", ids.event_msg_id(router.state.execution_id, "loop.started", run.run_id),
                step=step.name, step_run_id=run.run_id, total=iteration_count(run.loop),
                max_in_flight=limit)
    if spec.mode != CURSOR and not items:
        router.finish_run(run, ok=True, result=[], error=None)
        return
    schedule(router, step, run)


def schedule(router: Router, step: Step, run: Run) -> None:
    """Issue iterations until the loop's slots are full or it has nothing more to start."""
    loop = run.loop
    assert loop is not None
    while (loop.error is None and loop.route is None and _more_to_start(loop)
           and len(loop.in_flight) < loop.max_in_flight - loop.exhausted):
        index = loop.next_index
        loop.next_index += 1
        loop.in_flight.append(index)
        router.command(step, run, index, None if loop.mode == CURSOR else loop.items[index])


def on_outcome(router: Router, run: Run, index: int, ok: bool, event: OutcomeEvent,
               error: dict[str, JsonValue] | None) -> None:
    """Fold one outcome of an iteration that is in flight into its loop."""
    loop = run.loop
    assert loop is not None and index in loop.in_flight
    router.patch_ctx(ok, event)  # only now: a duplicate iteration event must not patch twice
    loop.in_flight.remove(index)
    children.forget(run, index)
    loop.issued_at.pop(str(index), None)
    loop.deadlines.pop(str(index), None)
    exhausted = ok and loop.mode == CURSOR and event.cursor is not None \
        and event.cursor.get("exhausted") is True
    if exhausted:
        loop.exhausted += 1  # this slot found nothing to claim: it is not refilled
    else:
        loop.done += 1
        if ok:
            loop.results[str(index)] = event.result
            # A case `next` on an iteration's call ends the loop early (spec 000 §1.2).
            loop.route = loop.route or event.route or None
        elif loop.error is None:
            loop.error = {**(error or {}), "iteration": index}
    progress: dict[str, bool] = {"exhausted": True} if exhausted else {}
    router.emit("loop.progress", ids.event_msg_id(router.state.execution_id, "loop.progress",
                                                  run.run_id, index),
                step=run.step, step_run_id=run.run_id, done=loop.done, total=iteration_count(loop),
                iteration=index, ok=ok, **progress)
    schedule(router, router.pb.step(run.step), run)
    if loop.in_flight:
        return
    if loop.error is not None:
        router.finish_run(run, ok=False, result=None, error=loop.error)
    elif loop.route is not None or not _more_to_start(loop) or loop.exhausted >= loop.max_in_flight:
        router.finish_run(run, ok=True, result=_ordered_results(loop), error=None, route=loop.route)


def iteration_vars(spec: LoopSpec, index: int, item: object,
                   total: int | None = None) -> dict[str, object]:
    """What an iteration's command carries in `iter`: a cursor's item is bound by the worker
    once it has claimed one. `_total` is the number of iterations, as NoETL's server binds it
    (a cursor loop has none: it is known only at its end).
    """
    if spec.mode == CURSOR:
        return {"_index": index}
    counted = {"_total": total} if total is not None else {}
    return {spec.iterator: item, "_index": index, **counted}


def command_cursor(step: Step) -> CommandCursor | None:
    """The claim a cursor loop's commands carry besides the tasks; None for any other step."""
    spec = step.loop
    if spec is None or spec.cursor is None:
        return None
    cursor = spec.cursor
    return CommandCursor(kind=cursor.kind, claim=cursor.claim, auth=cursor.auth,
                         connection=cursor.connection, iterator=spec.iterator)


def _limit(router: Router, step: Step, spec: LoopSpec,
           args: dict[str, JsonValue]) -> tuple[int, dict[str, Any] | None]:
    """How many iterations may be in flight, or the error that fails the step."""
    if spec.mode == "sequential":
        return 1, None
    value = spec.max_in_flight
    if value is None:
        return DEFAULT_MAX_IN_FLIGHT, None
    if isinstance(value, int):
        return value, None
    try:
        rendered = templating.render(value, router.context(reads=[value], args=args), step=step.name,
                                     field=LIMIT_FIELD)
    except TemplateError as exc:
        return 0, template_failure(router, step, exc, field=LIMIT_FIELD)
    whole = positive_int(rendered)
    if whole is None:
        return 0, {"message": f'step "{step.name}" field "{LIMIT_FIELD}": {value!r} gave '
                   f"{rendered!r}, not a positive whole number", "kind": "loop",
                   "field": LIMIT_FIELD}
    return whole, None


def _collection(router: Router, step: Step, spec: LoopSpec, run: Run) -> list[Any] | None:
    """The items of `loop.in`, or None after failing the run."""
    try:
        context = router.context(reads=[spec.collection], args=run.args)
        items = templating.render(spec.collection, context, step=step.name, field="loop.in")
    except TemplateError as exc:
        router.finish_run(run, ok=False, result=None, error=template_failure(router, step, exc))
        return None
    items = _as_items(items)
    if not isinstance(items, list):
        router.finish_run(run, ok=False, result=None, error={"message": items, "kind": "loop"})
        return None
    return items


def _as_items(value: object) -> list[Any] | str:
    """The iterations of what `loop.in` gave, as NoETL's server reads it, or why there are none:
    a list as it is; a mapping's items; text holding a JSON list, or else its comma- or
    line-separated parts; a whole number n as 0..n-1. Null is an error, not an empty loop: it is
    mostly a missing value (`| default([])` says "none" on purpose).
    """
    if isinstance(value, list):
        return value
    if isinstance(value, dict):
        return list(value.items())
    if isinstance(value, str):
        try:
            parsed = orjson.loads(value)
        except orjson.JSONDecodeError:
            parsed = None
        if isinstance(parsed, list):
            return parsed
        return [part.strip() for part in re.split(r"[,\n]", value) if part.strip()]
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= template_budget.MAX_RANGE:
        return list(range(value))
    if value is None:
        return ("loop.in gave null (a missing value?); write `| default([])` where no items "
                "is meant")
    return f"loop.in must give a list, got {type(value).__name__}"


def _more_to_start(loop: LoopState) -> bool:
    # A cursor loop has no end of its own: its slots run out as their claims come back empty.
    return loop.mode == CURSOR or loop.next_index < len(loop.items)


def iteration_count(loop: LoopState) -> int | None:
    """The number of iterations, None for a cursor loop (it is known only at its end)."""
    return None if loop.mode == CURSOR else len(loop.items)


def _ordered_results(loop: LoopState) -> list[Any]:
    if loop.mode == CURSOR:
        results = loop.all_results()
        return [results[key] for key in sorted(results, key=int)]
    results = loop.all_results()
    return [results.get(str(i)) for i in range(loop.next_index)]

