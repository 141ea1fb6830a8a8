"""The files of a backup folder, written so a restore can prove they are whole.

The manifest records, per stream, how many messages its `streams/<name>.jsonl` holds and the
SHA-256 of the file's bytes. `verified_manifest` checks every file against it before a restore
writes anything: a file cut off at a line boundary has too few messages and another checksum,
one cut off mid-line ends without its newline, and either names the file (and the line).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import IO, Any

from noetl_stream.errors import BackupError

FORMAT = 2
READABLE_FORMATS = frozenset({1, 2})  # format 1 carries counts but no checksums
MANIFEST = "manifest.json"


def stream_file(folder: Path, name: str) -> Path:
    return folder / "streams" / f"{name}.jsonl"


class MessageWriter:
    """Writes one stream's messages, one JSON line each, counting them and hashing the bytes."""

    def __init__(self, out: IO[bytes]) -> None:
        self._out = out
        self._hash = hashlib.sha256()
        self.count = 0

    def write(self, message: dict[str, Any]) -> None:
        line = (json.dumps(message) + "\n").encode()
        self._out.write(line)
        self._hash.update(line)
        self.count += 1

    @property
    def sha256(self) -> str:
        return self._hash.hexdigest()


def read_manifest(folder: Path) -> dict[str, Any]:
    path = folder / MANIFEST
    try:
        manifest = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise BackupError(f"{path}: not a readable manifest ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") not in READABLE_FORMATS:
        found = manifest.get("format") if isinstance(manifest, dict) else None
        raise BackupError(f"{path}: backup format {found!r}; this version reads formats "
                          f"{', '.join(map(str, sorted(READABLE_FORMATS)))}")
    streams = manifest.get("streams")
    if not isinstance(streams, list) or not all(
            isinstance(s, dict) and isinstance(s.get("name"), str) for s in streams):
        raise BackupError(f"{path}: `streams` is not a list of named streams")
    return manifest


def verified_manifest(folder: Path) -> dict[str, Any]:
    """The manifest, once every stream file it names is checked whole against it."""
    manifest = read_manifest(folder)
    for stream in manifest["streams"]:
        _verify(stream_file(folder, stream["name"]), stream, manifest["format"])
    return manifest


def _verify(path: Path, stream: dict[str, Any], fmt: int) -> None:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise BackupError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    lines = data.split(b"\n")
    if lines[-1]:
        raise BackupError(f"{path}: line {len(lines)} is cut off (the file does not end with "
                          "a whole line); the backup is incomplete")
    for number, line in enumerate(lines[:-1], start=1):
        _check_line(path, number, line)
    expected = stream.get("messages")
    if expected != len(lines) - 1:
        raise BackupError(f"{path}: holds {len(lines) - 1} messages, the manifest says "
                          f"{expected}; the backup is incomplete")
    digest = stream.get("sha256")
    if fmt >= 2 and digest != hashlib.sha256(data).hexdigest():
        raise BackupError(f"{path}: its SHA-256 differs from the manifest's; the file was "
                          "changed after the backup")


def _check_line(path: Path, number: int, line: bytes) -> None:
    try:
        message = json.loads(line)
    except ValueError:
        raise BackupError(f"{path}: line {number} is not a JSON message; the backup is "
                          "damaged") from None
    if not isinstance(message, dict) or not isinstance(message.get("seq"), int) \
            or not isinstance(message.get("subject"), str):
        raise BackupError(f"{path}: line {number} is not a message (it needs `seq` and "
                          "`subject`)")
