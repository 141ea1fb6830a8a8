"""JSON Schemas of the IR and message bodies, generated from the pydantic models (ARCHITECTURE §5).

It sits above dsl/, messages and api/ (it reads all three), so none of them imports it.
`schemas/` in the repository holds the output of `python -m noetl_stream.schemas`; a unit test
regenerates them in memory and fails when the files and the models disagree. `schemas/events/`
holds one schema per event type (noetl_stream/events.py), for anyone reading the events stream.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from pydantic import BaseModel

from noetl_stream.api.routes import api_document
from noetl_stream.dsl.models import Playbook
from noetl_stream.events import EVENT_TYPES, schema_file
from noetl_stream.jsonutil import JsonObject, JsonValue
from noetl_stream.messages import (
    CancelRequest,
    Command,
    EventEnvelope,
    ExecutionRequest,
    RequestReply,
    SignalEvent,
)
from noetl_stream.state.triggers import TriggerEvent, TriggerRecord
from noetl_stream.triggers.document import Trigger

# Every message that crosses a process boundary (messages.py), and the IR.
MODELS: dict[str, type[BaseModel]] = {
    "playbook.schema.json": Playbook,
    "execution-request.schema.json": ExecutionRequest,
    "request-reply.schema.json": RequestReply,
    "cancel-request.schema.json": CancelRequest,
    "command.schema.json": Command,
    "event-envelope.schema.json": EventEnvelope,
    "signal.schema.json": SignalEvent,
    # Triggers (docs/triggers.md): the document as stored, its KV record, its events.
    "trigger.schema.json": Trigger,
    "trigger-record.schema.json": TriggerRecord,
    "trigger-event.schema.json": TriggerEvent,
}

DEFAULT_DIR = Path(__file__).resolve().parents[2] / "schemas"
OPENAPI_FILE = "openapi.json"
EVENTS_DIR = "events"
JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"


def export_schemas() -> dict[str, JsonObject]:
    """File name -> JSON Schema, for every exported model."""
    return {name: {"$schema": JSON_SCHEMA_DIALECT, "$id": name, **model.model_json_schema()}
            for name, model in MODELS.items()}


def export_event_schemas() -> dict[str, JsonObject]:
    """File name (under `events/`) -> JSON Schema, one per event type; `event_type` is pinned."""
    out = {}
    for event_type, (model, meaning) in EVENT_TYPES.items():
        schema = model.model_json_schema()
        schema["properties"]["event_type"] = {**schema["properties"]["event_type"],
                                              "const": event_type}
        out[schema_file(event_type)] = {"$schema": JSON_SCHEMA_DIALECT,
                                        "$id": f"{EVENTS_DIR}/{schema_file(event_type)}",
                                        **schema, "title": event_type, "description": meaning}
    return out


def render_schema(schema: Mapping[str, JsonValue]) -> str:
    """The exact text written to disk: sorted keys, 2-space indent, trailing newline."""
    return json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def export_openapi() -> JsonObject:
    """The HTTP API's OpenAPI document (built from its route table and pydantic models)."""
    return api_document()


def write_schemas(out_dir: Path = DEFAULT_DIR) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, schema in [*export_schemas().items(), (OPENAPI_FILE, export_openapi())]:
        path = out_dir / name
        path.write_text(render_schema(schema), encoding="utf-8")
        written.append(path)
    events_dir = out_dir / EVENTS_DIR
    events_dir.mkdir(exist_ok=True)
    exported = export_event_schemas()
    for stale in events_dir.glob("*.schema.json"):
        if stale.name not in exported:
            stale.unlink()
    for name, schema in exported.items():
        path = events_dir / name
        path.write_text(render_schema(schema), encoding="utf-8")
        written.append(path)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m noetl_stream.schemas [OUT_DIR]`: write the schemas (default: repo schemas/)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) > 1 or (args and args[0] in ("-h", "--help")):
        print("usage: python -m noetl_stream.schemas [OUT_DIR]", file=sys.stderr)
        return 2
    out_dir = Path(args[0]) if args else DEFAULT_DIR
    for path in write_schemas(out_dir):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
