"""The checks a restore runs on a backup folder before it writes anything (pure file logic; the
end-to-end restore is tests/e2e/test_backup_restore.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from noetl_stream.errors import BackupError
from noetl_stream.server.backup_files import MessageWriter, stream_file, verified_manifest


def _backup(folder: Path, messages: int = 3, fmt: int = 2) -> Path:
    (folder / "streams").mkdir(parents=True)
    with stream_file(folder, "S").open("wb") as out:
        writer = MessageWriter(out)
        for seq in range(1, messages + 1):
            writer.write({"seq": seq, "subject": f"s.{seq}", "data": None})
    entry = {"name": "S", "messages": writer.count}
    if fmt >= 2:
        entry["sha256"] = writer.sha256
    (folder / "manifest.json").write_text(json.dumps({"format": fmt, "streams": [entry]}))
    return stream_file(folder, "S")


def test_a_whole_backup_passes(tmp_path: Path) -> None:
    _backup(tmp_path)
    assert verified_manifest(tmp_path)["streams"][0]["messages"] == 3


def test_a_cut_off_manifest_is_named(tmp_path: Path) -> None:
    _backup(tmp_path)
    manifest = tmp_path / "manifest.json"
    manifest.write_text(manifest.read_text()[:20])
    with pytest.raises(BackupError, match=r"manifest\.json: not a readable manifest"):
        verified_manifest(tmp_path)


def test_a_missing_stream_file_is_named(tmp_path: Path) -> None:
    _backup(tmp_path).unlink()
    with pytest.raises(BackupError, match=r"S\.jsonl: cannot be read"):
        verified_manifest(tmp_path)


def test_a_line_that_is_no_message_is_named_with_its_line(tmp_path: Path) -> None:
    path = _backup(tmp_path)
    lines = path.read_text().splitlines(keepends=True)
    path.write_text(lines[0] + '{"seq": "two"}\n' + lines[2])
    with pytest.raises(BackupError, match=r"S\.jsonl: line 2 is not a message"):
        verified_manifest(tmp_path)


def test_a_first_format_backup_is_checked_by_its_counts(tmp_path: Path) -> None:
    path = _backup(tmp_path, fmt=1)
    assert verified_manifest(tmp_path)["format"] == 1
    path.write_text("".join(path.read_text().splitlines(keepends=True)[:2]))
    with pytest.raises(BackupError, match="holds 2 messages, the manifest says 3"):
        verified_manifest(tmp_path)


def test_a_stream_field_of_another_type_than_a_backup_writes_is_named(tmp_path: Path) -> None:
    _backup(tmp_path)
    manifest = tmp_path / "manifest.json"
    doc = json.loads(manifest.read_text())
    doc["streams"][0]["consumers"] = {"durable_name": "x"}
    manifest.write_text(json.dumps(doc))
    with pytest.raises(BackupError, match=r"manifest\.json: stream S: consumers not as a backup writes it"):
        verified_manifest(tmp_path)
