"""Stored formats (formats.py): the chain of migrations, the refusal of a newer version, and the
golden records of every version kept under tests/fixtures, which every later release reads."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from noetl_stream import formats, jsonutil
from noetl_stream.bus.dispositions import Failure, classify
from noetl_stream.formats import STATE, VERSION_FIELD, Format, NewerFormat
from noetl_stream.router.state import ExecutionState
from noetl_stream.server.state_codec import writable
from noetl_stream.state.auth_cache import CacheEntry
from noetl_stream.state.catalog import read_links
from noetl_stream.state.credentials import CredentialRecord
from noetl_stream.state.sessions import SessionRecord
from noetl_stream.state.users import ApiKeyRecord, UserRecord

FIXTURES = Path(__file__).parents[1] / "fixtures"
GOLDEN_RECORDS = sorted((FIXTURES / "formats").glob("records-*.json"))
GOLDEN_STATES = sorted(FIXTURES.glob("inflight-schema-*.json"))


def _model(cls: Any) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def read(record: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = cls.model_validate(record).model_dump(mode="json")
        return out
    return read


def _links(record: dict[str, Any]) -> dict[str, Any]:
    return formats.CATALOG_LINKS.stamp({"links": read_links(record)})


# How this release reads each format, as its stores do.
READERS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "credential": _model(CredentialRecord),
    "user": _model(UserRecord),
    "API key": _model(ApiKeyRecord),
    "session": _model(SessionRecord),
    "resolved credential": _model(CacheEntry),
    "catalog links": _links,
    "stored step result": formats.STEP_RESULT.read,
    "attempt claim": formats.CLAIM.read,
    "outbox mark": formats.OUTBOX_MARK.read,
}
BY_NAME = {f.name: f for f in formats.FORMATS}


def chain() -> Format:
    """Three versions: 2 renamed `n` to `count`, 3 added `unit`."""
    return Format("sample", 3, {
        1: lambda r: {**{k: v for k, v in r.items() if k != "n"}, "count": r["n"]},
        2: lambda r: {**r, "unit": "rows"},
    })


def test_an_older_record_goes_through_every_migration_in_order() -> None:
    assert chain().read({"n": 4}) == {"count": 4, "unit": "rows", VERSION_FIELD: 3}
    assert chain().read({"count": 4, VERSION_FIELD: 2}) == {"count": 4, "unit": "rows",
                                                            VERSION_FIELD: 3}
    current = {"count": 4, "unit": "kB", VERSION_FIELD: 3}
    assert chain().read(current) is current


def test_a_newer_record_is_refused_and_named() -> None:
    with pytest.raises(NewerFormat, match="execution 7's state has schema version 4; this "
                       "release reads versions up to 3") as caught:
        chain().read({"count": 1, VERSION_FIELD: 4}, "execution 7's state")
    assert (caught.value.found, caught.value.known) == (4, 3)
    assert classify(caught.value) is Failure.NEWER_FORMAT  # its message is handed back


def test_a_newer_record_may_be_shown_as_written() -> None:
    newer = {"count": 1, "later": True, VERSION_FIELD: 4}
    assert chain().read_newer(newer) is newer


@pytest.mark.parametrize("version", ["2", 0, True, None])
def test_a_version_that_is_no_version_is_an_error(version: Any) -> None:
    with pytest.raises(ValueError, match="is not a version"):
        chain().read({"count": 1, VERSION_FIELD: version})


def test_a_format_without_a_migration_from_each_older_version_cannot_be_declared() -> None:
    with pytest.raises(ValueError, match=r"no migration from version\(s\) \[2\]"):
        Format("gap", 3, {1: dict})


def test_a_state_a_newer_release_wrote_is_read_but_never_rewritten() -> None:
    newer = {"execution_id": "9", "playbook_key": "pb_x", "added_later": 1,
             VERSION_FIELD: STATE.current + 1}
    state = ExecutionState.from_dict(newer)
    assert state.schema_version == STATE.current + 1  # shown (status, logs) as written
    with pytest.raises(NewerFormat, match=f"the state of execution 9 has schema version "
                       f"{STATE.current + 1}"):
        writable(state)
    assert writable(ExecutionState.from_dict({"execution_id": "9", "playbook_key": "pb_x"}))


@pytest.mark.parametrize("fixture", GOLDEN_STATES, ids=[p.stem for p in GOLDEN_STATES])
def test_every_golden_state_reads_and_is_written_back_in_the_current_version(
        fixture: Path) -> None:
    written = json.loads(fixture.read_text())
    stored = written["state"]
    state = writable(ExecutionState.from_dict(stored))
    assert state.schema_version == STATE.current
    again = state.to_dict()
    assert again[VERSION_FIELD] == STATE.current
    # A field added later with a default (add-only rule) reads as that default, at any depth.
    assert _without_added(again, stored) == {k: v for k, v in stored.items() if k != VERSION_FIELD}
    for key, raw in written["kv"]["noetl_step_results"].items():
        entry = jsonutil.loads(base64.b64decode(raw))
        if ".claim." in key:
            assert formats.CLAIM.read(entry)["msg_id"].startswith("cmd:")
        elif key.endswith(".outbox"):
            assert isinstance(formats.OUTBOX_MARK.read(entry)["revision"], int)
        else:
            assert "v" in formats.STEP_RESULT.read(entry)


def _without_added(again: Any, stored: Any) -> Any:
    """`again` without the fields `stored` lacks, each of which must hold its default."""
    if not isinstance(again, dict) or not isinstance(stored, dict):
        return again
    added = {k: v for k, v in again.items() if k not in stored and k != VERSION_FIELD}
    assert all(v in ({}, [], None, 0) for v in added.values()), added
    return {k: _without_added(v, stored[k]) for k, v in again.items()
            if k != VERSION_FIELD and k not in added}


def test_the_current_state_format_has_a_golden_state() -> None:
    assert FIXTURES / f"inflight-schema-{STATE.current}.json" in GOLDEN_STATES


@pytest.mark.parametrize("fixture", GOLDEN_RECORDS, ids=[p.stem for p in GOLDEN_RECORDS])
def test_every_golden_record_reads_in_the_current_version(fixture: Path) -> None:
    records: dict[str, dict[str, Any]] = json.loads(fixture.read_text())
    for name, record in records.items():
        read = READERS[name](record)
        assert read[VERSION_FIELD] == BY_NAME[name].current, name
        assert {k: v for k, v in read.items() if k != VERSION_FIELD} == \
            {k: v for k, v in record.items() if k != VERSION_FIELD}, name


def test_every_stored_format_has_a_reader_and_a_golden_record_of_its_version() -> None:
    assert set(READERS) | {STATE.name} == set(BY_NAME)
    for name in READERS:
        golden = FIXTURES / "formats" / f"records-{BY_NAME[name].current}.json"
        assert name in json.loads(golden.read_text()), name


@pytest.mark.parametrize("name", sorted(READERS))
def test_an_unversioned_record_reads_as_version_one(name: str) -> None:
    record = json.loads((FIXTURES / "formats" / "records-2.json").read_text())[name]
    unversioned = {k: v for k, v in record.items() if k != VERSION_FIELD}
    if name == "catalog links":
        unversioned = unversioned["links"]  # version 1 was the mapping itself
    assert READERS[name](unversioned) == READERS[name](record)


@pytest.mark.parametrize("name", sorted(READERS))
def test_a_record_a_newer_release_wrote_is_refused(name: str) -> None:
    record = json.loads((FIXTURES / "formats" / "records-2.json").read_text())[name]
    newer = BY_NAME[name].current + 1
    with pytest.raises(NewerFormat, match=f"{name} has schema version {newer}"):
        READERS[name]({**record, VERSION_FIELD: newer})
