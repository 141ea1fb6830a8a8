"""schemas/ holds exactly what the pydantic models export (ARCHITECTURE §5)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from noetl_stream import schemas as schema

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "schemas"
FIX = "schemas/ is out of date with the models; run `python -m noetl_stream.schemas` and commit the result"


def test_schema_export_covers_the_ir_and_every_message() -> None:
    exported = schema.export_schemas()
    assert set(exported) == {"playbook.schema.json", "execution-request.schema.json",
                             "request-reply.schema.json", "cancel-request.schema.json",
                             "command.schema.json", "event-envelope.schema.json",
                             "signal.schema.json", "trigger.schema.json",
                             "trigger-record.schema.json", "trigger-event.schema.json"}
    assert exported["command.schema.json"]["title"] == "Command"
    assert "context" in exported["command.schema.json"]["properties"]
    assert exported["cancel-request.schema.json"]["required"] == ["execution_id"]
    # The identifier limits are part of the published contract, not only of the code.
    execution_id = exported["cancel-request.schema.json"]["properties"]["execution_id"]
    assert (execution_id["maxLength"], execution_id["pattern"]) == (128, "^[A-Za-z0-9_-]+$")
    assert exported["playbook.schema.json"]["title"] == "Playbook"
    assert "steps" in exported["playbook.schema.json"]["required"]
    assert exported["execution-request.schema.json"]["title"] == "ExecutionRequest"
    assert exported["request-reply.schema.json"]["title"] == "RequestReply"


@pytest.mark.parametrize("name", sorted(schema.MODELS))
def test_schema_file_matches_the_model(name: str) -> None:
    path = SCHEMA_DIR / name
    assert path.exists(), f"{path} is missing; {FIX}"
    assert path.read_text(encoding="utf-8") == schema.render_schema(schema.export_schemas()[name]), FIX


def test_schema_dir_holds_no_stale_files() -> None:
    stale = {p.name for p in SCHEMA_DIR.glob("*.schema.json")} - set(schema.MODELS)
    assert not stale, f"{sorted(stale)} no longer come from a model; {FIX}"


def test_schema_main_writes_sorted_indented_files_to_the_given_dir(tmp_path: Path) -> None:
    out = tmp_path / "schemas"
    assert schema.main([str(out)]) == 0
    text = (out / "request-reply.schema.json").read_text(encoding="utf-8")
    assert text.endswith("}\n")
    assert text.startswith('{\n  "$id": "request-reply.schema.json",\n')
    data = json.loads(text)
    assert list(data) == sorted(data)
    assert {p.name for p in out.iterdir()} == set(schema.MODELS) | {schema.OPENAPI_FILE,
                                                                     schema.EVENTS_DIR}
    assert {p.name for p in (out / schema.EVENTS_DIR).iterdir()} == set(
        schema.export_event_schemas())


@pytest.mark.parametrize("name", sorted(schema.export_event_schemas()))
def test_event_schema_file_matches_the_catalog(name: str) -> None:
    path = SCHEMA_DIR / schema.EVENTS_DIR / name
    assert path.exists(), f"{path} is missing; {FIX}"
    assert path.read_text(encoding="utf-8") == schema.render_schema(
        schema.export_event_schemas()[name]), FIX


def test_event_schema_dir_holds_no_stale_files() -> None:
    stale = ({p.name for p in (SCHEMA_DIR / schema.EVENTS_DIR).glob("*.schema.json")}
             - set(schema.export_event_schemas()))
    assert not stale, f"{sorted(stale)} no longer come from the event catalog; {FIX}"


def test_schema_default_dir_is_the_repository_schemas_folder() -> None:
    assert schema.DEFAULT_DIR == SCHEMA_DIR
