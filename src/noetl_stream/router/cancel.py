"""Cancellation of an execution (ARCHITECTURE §6.4). Pure, part of the router.

The server turns a cancel request into the execution's `execution.cancel.requested` event, so a
cancellation is ordered in the event log with everything else and replays the same. Applying it
stops all scheduling: every running run is cut short (`step.cancelled`, naming the loop
iterations still in flight), delayed tokens and waiting joins are dropped, and the execution
ends `cancelled` with no result (the router then publishes `execution.cancelled` with the
summary). The child executions the cut runs wait on are cancelled by the router itself
(router/children.py), so they stop even when no worker is left to hear about it. Workers hear
`execution.cancelled` and stop the commands they still run. Outcomes that arrive later are ignored
like any event of a finished execution.
"""

from __future__ import annotations

from noetl_stream import ids
from noetl_stream.events import CancelRequested
from noetl_stream.router import children
from noetl_stream.router.interface import Router

REQUESTED = "execution.cancel.requested"


def apply_cancel(router: Router, event: CancelRequested) -> None:
    """Cut every running run short and mark the execution cancelled."""
    state = router.state
    reason = event.reason or "cancel requested"
    requested_by = event.requested_by
    for run in state.active_runs:
        in_flight = list(run.loop.in_flight) if run.loop is not None else []
        run.status = "cancelled"
        rec = state.record(run.step)
        rec.status = "cancelled"
        rec.error = {"message": f"cancelled: {reason}", "kind": "cancelled"}
        router.emit("step.cancelled", ids.event_msg_id(state.execution_id, "step.cancelled",
                                                       run.run_id),
                    step=run.step, step_run_id=run.run_id, iterations=in_flight, reason=reason)
        children.cancel_run(router, run, f"its parent {state.execution_id} was cancelled: "
                                         f"{reason}")
    state.delayed.clear()
    state.joins.clear()
    state.status = "cancelled"
    # No result: the last step that happened to finish did not produce the execution's outcome.
    # Each finished step keeps its own result.
    state.set_result(state, None)
    state.error = {"message": f"execution cancelled: {reason}", "kind": "cancelled",
                   "reason": reason, "requested_by": requested_by}
