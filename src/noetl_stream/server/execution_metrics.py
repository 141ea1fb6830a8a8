"""What the server records of an execution as its router decides: the executions started and
ended (for /metrics; commands are counted by workers) and the execution's root span once it ended.
"""

from __future__ import annotations

from noetl_stream.dsl.models import Playbook
from noetl_stream.observe import tracing
from noetl_stream.observe.metrics import observe_outbox
from noetl_stream.router.state import ExecutionState, Outgoing


def count_execution(state: ExecutionState, outbox: list[Outgoing], playbook: Playbook) -> None:
    """Executions started and ended, for /metrics (commands are counted by workers) and the
    execution's root span once it has ended.
    """
    name = playbook.path or playbook.name
    observe_outbox(((m.event_type, m.plain_body) for m in outbox
                    if m.kind == "event" and m.event_type.startswith("execution.")), name)
    if state.trace and state.status != "running" and state.ended_at is not None and any(
            m.event_type == f"execution.{state.status}" for m in outbox):
        tracing.record_execution(state.trace, execution_id=state.execution_id, playbook=name,
                                 status=state.status, started_at=state.started_at,
                                 ended_at=state.ended_at)
