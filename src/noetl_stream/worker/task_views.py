"""What the templates of a pipeline's task read about a call: its outcome as `output`,
`outcome`, `response` and `this`, what a sink reads, and a task's config rendered.
"""

from __future__ import annotations

from collections.abc import Mapping

from noetl_stream.dsl import templating
from noetl_stream.dsl.models import Task
from noetl_stream.dsl.parsing.tasks import verbatim
from noetl_stream.dsl.views import output_view
from noetl_stream.tools.base import Outcome


def outcome_views(task: Task, outcome: Outcome) -> dict[str, object]:
    """`output` (NoETL today) and `outcome` (spec 002/003) as templates read them."""
    # NoETL reads `output` both as the envelope (`output.status`, `output.data`) and as the result
    # itself (`{{ output }}['count']`): the result's keys are there too, the envelope's win.
    output = output_view(outcome.result, outcome.error, outcome.http, status=outcome.status)
    result = outcome.result
    if task.kind == "http" and outcome.http is not None:
        result = {"status_code": outcome.http["status"], "headers": outcome.http["headers"],
                  "data": outcome.result}
    return {"output": output,
            "outcome": {"status": outcome.status, "result": result, "error": outcome.error,
                        "http": outcome.http, "pg": output["pg"], "meta": outcome.meta}}


def case_views(outcome: Outcome) -> dict[str, object]:
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


def sink_view(result: object, outcome: Outcome | None) -> dict[str, object]:
    """The names a sink's templates read: the data to store and the call's envelope."""
    this = case_views(outcome)["this"] if outcome is not None else None
    return {"result": result, "data": result, "this": this}


def reads_names(task: Task) -> bool:
    """Whether calling `task` reads the pipeline's names: a template in its config or input, or
    python code. A task without either is called as written, without building them.
    """
    if task.kind == "python":
        return True
    return (bool(task.config) and next(templating.template_strings(task.config), None) is not None
            ) or (bool(task.input) and next(templating.template_strings(task.input), None)
                  is not None)


def rendered_call(task: Task, context: Mapping[str, object],
                  step: str) -> tuple[dict[str, object], dict[str, object]]:
    """A task's config (each field as `rendered_field` renders it) and input, rendered."""
    config = {k: rendered_field(task, k, v, context, step) for k, v in task.config.items()}
    if not task.input:
        return config, {}
    return config, templating.render(task.input, context, step=step, field="tool.input")


def rendered_field(task: Task, key: str, value: object, context: Mapping[str, object],
                   step: str) -> object:
    """One config field with its templates rendered, as NoETL renders a task's whole config.

    Python code is text whatever its templates give (`{{ workload.n }} * 2`); code read from a
    script file and the `script` descriptor are taken as written (dsl/parser.py `verbatim`).
    """
    if verbatim(task.config, key):
        return value
    rendered = templating.render(value, context, step=step, field=f"tool.{key}")
    if key == "code" and not isinstance(rendered, str):
        rendered = "" if rendered is None else str(rendered)
    return rendered


def kept_task_result(outcome: Outcome, value: object) -> object:
    """A task's result as a step's per-task map keeps it: an http call's as NoETL's Python engine
    hands it on (`{status_code, headers, data: <body>}`), any other as the task left it.
    """
    if outcome.http is not None and value is outcome.result:
        return {"status_code": outcome.http.get("status"), "headers": outcome.http.get("headers") or {},
                "data": value}
    return value


def with_task_results(result: object, kept: Mapping[str, object]) -> object:
    """The step's result with its per-task map as `results`, as NoETL's Python engine shapes a
    pipeline's result; a result that is not a mapping, or has its own `results`, stays as it is.
    """
    if isinstance(result, dict) and "results" not in result:
        return {**result, "results": kept}
    return result
