"""Admission of an execution under a concurrency limit (`executor.spec.concurrency`, or the
`concurrency` of the request that started it). Pure, part of the router.

Such an execution starts waiting: its state holds `admission` (the group: playbook and rendered
key; the limit; what to do at the limit) and its start step does not fire. The router emits
`concurrency.requested`; the servers' admission service (server/admission.py) takes a slot for
it in KV `noetl_concurrency` and then publishes `execution.admitted` on the execution's subject,
which the router applies like any event: the start step fires and the execution timeout starts
counting. A refusal (`on_limit: skip`), and the oldest execution cut short for a newer one
(`cancel_oldest`), are cancel requests. Whenever the execution ends (completed, failed,
cancelled, while running or still waiting) the router emits `concurrency.released`, and the
service frees its slot or its place in line. Both are outbox events, committed with the state,
so a crash of the server loses neither.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from noetl_stream import ids
from noetl_stream.dsl import execution_limits, templating
from noetl_stream.events import ExecutionAdmitted
from noetl_stream.router import deadlines
from noetl_stream.router.interface import Router
from noetl_stream.router.state import Admission, ExecutionState

REQUESTED = "concurrency.requested"
RELEASED = "concurrency.released"
ADMITTED = "execution.admitted"


def hold(router: Router, requested: Mapping[str, Any] | None) -> dict[str, Any]:
    """Put a new execution in line when a limit applies to it: the playbook's own, else the
    request's (a trigger's), so whoever starts the playbook, its own limit holds. Returns the
    fields `execution.started` carries about it (none without a limit).
    """
    if requested:
        problems = execution_limits.concurrency_problems(
            {k: requested[k] for k in ("limit", "key", "on_limit") if k in requested},
            None, "concurrency")
        if problems:  # a request's own limit (a trigger's is checked when it is applied)
            raise ValueError("; ".join(f"{field}: {message}" for _, field, message in problems))
    spec = execution_limits.concurrency_of(router.pb.executor)
    if spec is None and requested:
        spec = execution_limits.Concurrency.model_validate(
            {k: requested[k] for k in ("limit", "key", "on_limit") if k in requested})
    if spec is None:
        return {}
    key = ""
    if spec.key is not None:
        key = str(templating.render(spec.key, router.context(),
                                    field="executor.spec.concurrency.key"))
    router.state.admission = {"group": group_of(router.pb.path or router.pb.name, key),
                              "key": key, "limit": spec.limit, "on_limit": spec.on_limit,
                              "waiting": True}
    return {"concurrency": {**spec.model_dump(), "group": router.state.admission["group"]}}


def group_of(playbook: str, key: str) -> str:
    """The name of a group: the playbook, and the rendered key when there is one."""
    return f"{playbook}[{key}]" if key else playbook


def waiting(state: ExecutionState) -> bool:
    return state.admission is not None and bool(state.admission.get("waiting"))


def begin(router: Router) -> None:
    """Right after `execution.started`: ask for a slot, or (no limit) fire the start step."""
    deadlines.arm_sla(router)
    state = router.state
    if not waiting(state):
        deadlines.arm_timeout(router)
        router.fire(router.pb.start_step.name, {})
        return
    assert state.admission is not None
    router.emit(REQUESTED, ids.event_msg_id(state.execution_id, REQUESTED),
                **_fields(state.admission), playbook=router.pb.path or router.pb.name)


def on_admitted(router: Router, event: ExecutionAdmitted) -> bool:
    """`execution.admitted`: the execution holds a slot; its start step fires now."""
    state = router.state
    if not waiting(state):
        return False  # admitted already (a copy), or no limit applies
    assert state.admission is not None
    state.admission["waiting"] = False
    state.admission["admitted_at"] = router.now
    deadlines.arm_timeout(router)
    router.fire(router.pb.start_step.name, {})
    return False


def released(router: Router) -> None:
    """The execution ended: its slot (or its place in line) is given up."""
    state = router.state
    if state.admission is None or state.admission.get("released"):
        return
    state.admission["released"] = True
    router.emit(RELEASED, ids.event_msg_id(state.execution_id, RELEASED),
                **_fields(state.admission), status=state.status)


def _fields(admission: Admission) -> dict[str, str | int]:
    return {"group": admission["group"], "key": admission["key"], "limit": admission["limit"],
            "on_limit": admission["on_limit"]}
