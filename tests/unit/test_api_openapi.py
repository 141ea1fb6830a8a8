"""The API's route table, its OpenAPI document (checked in as schemas/openapi.json), roles,
password hashing and the Prometheus text rendering: everything that needs no server."""

from __future__ import annotations

from pathlib import Path

from noetl_stream import schemas as schema
from noetl_stream.api.auth import ROLE_PERMISSIONS, Principal
from noetl_stream.api.routes import all_endpoints, api_document
from noetl_stream.state.users import check_password, hash_password

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "schemas"
FIX = "schemas/openapi.json is out of date; run `python -m noetl_stream.schemas` and commit it"


def test_openapi_file_matches_the_route_table() -> None:
    path = SCHEMA_DIR / schema.OPENAPI_FILE
    assert path.exists(), FIX
    assert path.read_text(encoding="utf-8") == schema.render_schema(api_document()), FIX


def test_openapi_document_describes_every_route_once_with_its_security() -> None:
    doc = api_document()
    assert doc["openapi"] == "3.1.0"
    endpoints = all_endpoints()
    described = {(m.upper(), p) for p, ops in doc["paths"].items() for m in ops}
    assert described == {(e.method, e.path) for e in endpoints}
    operation_ids = [op["operationId"] for ops in doc["paths"].values() for op in ops.values()]
    assert len(operation_ids) == len(set(operation_ids))
    public = {(m.upper(), p) for p, ops in doc["paths"].items() for m, op in ops.items()
              if op.get("security") == []}
    # a webhook is authenticated by its body's signature, not a token
    assert public == {("GET", "/health"), ("POST", "/api/sessions"), ("POST", "/api/hooks/{name}")}
    for p, ops in doc["paths"].items():
        for m, op in ops.items():
            if (m.upper(), p) not in public:
                assert {"401", "403"} <= set(op["responses"]), (m, p)


def test_roles_grant_what_the_docs_say() -> None:
    def may(role: str, permission: str) -> bool:
        return Principal("u", (role,), "api_key").may(permission)  # type: ignore[arg-type]

    assert all(may("admin", p) for p in ROLE_PERMISSIONS["admin"])
    assert may("operator", "run") and may("operator", "control") and may("operator", "vars.write")
    assert not may("operator", "credentials.data") and not may("operator", "credentials.write")
    assert may("viewer", "read") and not may("viewer", "run")
    assert may("worker", "credentials.data") and not may("worker", "run")


def test_password_hash_checks_the_password_and_salts_every_hash() -> None:
    first, second = hash_password("pw-one"), hash_password("pw-one")
    assert first.salt != second.salt and first.hash != second.hash
    assert check_password("pw-one", first) and not check_password("pw-two", first)
    assert "pw-one" not in first.model_dump_json()
