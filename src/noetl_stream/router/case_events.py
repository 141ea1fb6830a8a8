"""The audit events of a spec 001 case (spec 001 §2.3, §5.4), published as progress events.

`case.evaluated` reports the branches an outcome found true; `next.evaluated` the route that won
and the arcs it fired; `case.branch.suppressed` each true branch that did not run because the
winner's `next_policy` is `end_step`. They describe decisions already taken by the compiled rules
(dsl/dialects/v2_spec001.py) and by `route`; nothing here changes the marking.
"""

from __future__ import annotations

from typing import Any

from noetl_stream import ids
from noetl_stream.dsl.models import Arc, Step
from noetl_stream.events import OutcomeEvent
from noetl_stream.router.interface import Router
from noetl_stream.router.state import Run

EVENTS = frozenset({"case.evaluated", "next.evaluated", "case.branch.suppressed"})


def evaluated(router: Router, step: Step, run: Run, event: OutcomeEvent) -> None:
    """An ok outcome of a spec 001 step: remember and publish the branches it found true."""
    matched = event.case_matched
    if step.case is None or matched is None:
        router.case_matched = []
        return
    router.case_matched = [str(m) for m in matched]
    index = event.iteration
    router.emit("case.evaluated", ids.event_msg_id(router.state.execution_id, "case.evaluated",
                                                   run.run_id, index),
                step=step.name, step_run_id=run.run_id, iteration=index,
                matched=router.case_matched, order=router.case_matched, case_mode=step.case.mode,
                eval_mode="on_entry", trigger_event="call.done")


def next_evaluated(router: Router, step: Step, run: Run, route: str | None,
                   fired: list[tuple[Arc, dict[str, Any]]]) -> None:
    """A case route decided where the step goes: publish the winner and what it suppressed."""
    if step.case is None or route is None:
        return
    winner = next((b for b in step.case.branches if b.route == route), None)
    if winner is None:
        return
    matched = router.case_matched
    after = matched[matched.index(winner.name) + 1:] if winner.name in matched else []
    suppressed = after if winner.policy == "end_step" else []
    execution = router.state.execution_id
    router.emit("next.evaluated", ids.event_msg_id(execution, "next.evaluated", run.run_id),
                step=step.name, step_run_id=run.run_id,
                selected=[{"step": arc.step, "with": args} for arc, args in fired],
                policy=winner.policy, winner_branch=winner.name, suppressed_branches=suppressed,
                routing_committed=True)
    for name in suppressed:
        router.emit("case.branch.suppressed", ids.event_msg_id(
            execution, "case.branch.suppressed", run.run_id, name), step=step.name,
            step_run_id=run.run_id, branch=name, winner_branch=winner.name, reason=winner.policy)
