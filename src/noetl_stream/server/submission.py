"""Publishing an execution request: the one way the runtime's own parts (`run`, the API,
triggers) start an execution by id.
"""

from __future__ import annotations

from noetl_stream import ids
from noetl_stream.bus.connection import Bus
from noetl_stream.jsonutil import JsonObject
from noetl_stream.messages import ExecutionRequest
from noetl_stream.server.execution_ids import new_execution_id


async def submit(bus: Bus, *, playbook_text: str, playbook_file: str, payload: JsonObject,
                 execution_id: str | None = None,
                 concurrency: JsonObject | None = None,
                 labels: dict[str, str] | None = None) -> str:
    """Publish an execution request and return its execution id once JetStream has stored it."""
    execution_id = execution_id or new_execution_id()
    request = ExecutionRequest(execution_id=execution_id, playbook=playbook_text,
                               playbook_file=playbook_file, payload=payload,
                               concurrency=concurrency, labels=labels or {})
    await bus.js.publish(bus.topology.execute_request_subject(),
                         request.model_dump_json().encode(),
                         headers={"Nats-Msg-Id": ids.request_msg_id(execution_id)})
    return execution_id
