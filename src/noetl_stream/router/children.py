"""Child executions a step waits on (ARCHITECTURE §6.4). Pure, part of the router.

A `kind: playbook` task starts a child execution; once the child's state is committed, the server
records `child.started` {child_execution_id, step_run_id, iteration, detached} in the PARENT's
event log. The router keeps the child on the run that started it (per loop iteration) while that
run or iteration is in flight, and so can stop it when the parent gives up on the command, with
no worker involved:

- the parent is cancelled, or fails while the run still waits: every recorded child;
- the watchdog fails the run or one iteration: the children of that run or iteration;
- `child.started` arrives after its run or iteration stopped being in flight (cut short, or the
  whole execution over): that child at once, so a late start leaves no orphan.

Stopping a child is a cancel request (outbox kind `cancel`, published on
`<prefix>.requests.cancel` with `Nats-Msg-Id: cancel:<child>` like any other cancel request);
asking to cancel a child that already ended is refused by the server and changes nothing.
Children that end normally leave the record with their iteration or run. Detached children
(`async: true`, fire-and-forget) are never recorded nor cancelled.

Invariant: a child id sits in at most one list, under the key of the command that started it
(`-` for a step without a loop, else the iteration number).
"""

from __future__ import annotations

from noetl_stream import ids
from noetl_stream.events import ChildStarted
from noetl_stream.router.interface import Router
from noetl_stream.router.state import Outgoing, Run

STARTED = "child.started"
NO_LOOP = "-"  # the key of a step's own command, as in command msg ids


def key_of(index: int | None) -> str:
    return NO_LOOP if index is None else str(index)


def on_started(router: Router, event: ChildStarted) -> None:
    """Record a child on its run or iteration in flight, or cancel it when that is over."""
    child, index = event.child_execution_id, event.iteration
    if event.detached or not ids.is_subject_token(child):
        return  # fire-and-forget, or not a child this router could tie to a command
    run = router.state.runs.get(event.step_run_id)
    if router.state.status == "running" and run is not None and _in_flight(run, index):
        waiting = run.children.setdefault(key_of(index), [])
        if child not in waiting:  # a redelivered request or event: already recorded
            waiting.append(child)
        return
    request(router, [child], f"its parent {router.state.execution_id} no longer waits for it")


def _in_flight(run: Run, index: int | None) -> bool:
    if run.status != "running":
        return False
    if run.loop is None:
        return index is None
    return index is not None and index in run.loop.in_flight


def cancel_run(router: Router, run: Run, reason: str) -> None:
    """Cancel every child the run still waits on (the whole run was cut short)."""
    # Insertion order survives the JSON round trip, so replays emit the same outbox.
    request(router, [child for waiting in run.children.values() for child in waiting], reason)
    run.children.clear()


def cancel_command(router: Router, run: Run, index: int | None, reason: str) -> None:
    """Cancel the children of one command of the run (the run itself, or one iteration)."""
    request(router, run.children.pop(key_of(index), []), reason)


def forget(run: Run, index: int | None) -> None:
    """A command ended with an outcome: its children ended with it (the task waited for them)."""
    run.children.pop(key_of(index), None)


def request(router: Router, children: list[str], reason: str) -> None:
    state = router.state
    for child in children:
        body = {"execution_id": child, "reason": reason,
                "requested_by": f"execution {state.execution_id}"}
        router.send(Outgoing("cancel", ids.cancel_msg_id(child), body))

