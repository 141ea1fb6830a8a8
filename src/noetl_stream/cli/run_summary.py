"""The one document `run --json` (and `restart`, `replay`) prints for an ended execution.

An execution's last `execution.*` event carries the result of the last step that completed.
For a completed execution that is its result; for a failed or cancelled one it is only an
earlier step's, so the document's `result` is null there (each step's own result stays under
`steps`) and `failed_step` names the step whose failure ended the execution.
"""

from __future__ import annotations

from noetl_stream.jsonutil import JsonObject


def summary_of(final: JsonObject) -> JsonObject:
    """`{execution_id, status, result, failed_step, error, steps, ctx, vars}` of a final event."""
    completed = final.get("status") == "completed"
    error = final.get("error")
    failed_step = error.get("step") if isinstance(error, dict) and not completed else None
    return {"execution_id": final.get("execution_id"), "status": final.get("status"),
            "result": final.get("result") if completed else None,
            "failed_step": failed_step if final.get("status") == "failed" else None,
            "error": error, "steps": final.get("steps"), "ctx": final.get("ctx"),
            "vars": final.get("vars")}
