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
from typing import IO, NotRequired, TypedDict

from noetl_stream.errors import BackupError
from noetl_stream.jsonutil import JsonObject, JsonValue

FORMAT = 2
READABLE_FORMATS = frozenset({1, 2})  # format 1 carries counts but no checksums
MANIFEST = "manifest.json"


class StreamEntry(TypedDict):
    """One stream of a manifest as a restore reads it: what `backup` wrote of it."""

    name: str
    config: NotRequired[JsonObject]  # as JetStream reported it
    consumers: NotRequired[list[JsonObject]]  # {config, ack_floor} of each durable
    messages: NotRequired[int]  # in its file
    sha256: NotRequired[str]  # of its file (format 2)
    source_floor: NotRequired[int]  # a stream that copies another: where its copy starts


class Manifest(TypedDict):
    format: int
    streams: list[StreamEntry]


def stream_file(folder: Path, name: str) -> Path:
    return folder / "streams" / f"{name}.jsonl"


class MessageWriter:
    """Writes one stream's messages, one JSON line each, counting them and hashing the bytes."""

    def __init__(self, out: IO[bytes]) -> None:
        self._out = out
        self._hash = hashlib.sha256()
        self.count = 0

    def write(self, message: JsonObject) -> None:
        line = (json.dumps(message) + "\n").encode()
        self._out.write(line)
        self._hash.update(line)
        self.count += 1

    @property
    def sha256(self) -> str:
        return self._hash.hexdigest()


def read_manifest(folder: Path) -> Manifest:
    path = folder / MANIFEST
    try:
        manifest: JsonValue = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise BackupError(f"{path}: not a readable manifest ({exc})") from None
    fmt = manifest.get("format") if isinstance(manifest, dict) else None
    if not isinstance(manifest, dict) or not isinstance(fmt, int) or fmt not in READABLE_FORMATS:
        raise BackupError(f"{path}: backup format {fmt!r}; this version reads formats "
                          f"{', '.join(map(str, sorted(READABLE_FORMATS)))}")
    streams = manifest.get("streams")
    if not isinstance(streams, list) or not all(
            isinstance(s, dict) and isinstance(s.get("name"), str) for s in streams):
        raise BackupError(f"{path}: `streams` is not a list of named streams")
    return {"format": fmt, "streams": [_entry(path, s) for s in streams if isinstance(s, dict)]}


def _entry(path: Path, raw: JsonObject) -> StreamEntry:
    """A stream of the manifest, each field it holds of the type `backup` writes."""
    name = raw.get("name")
    if not isinstance(name, str):
        raise BackupError(f"{path}: a stream has no name")
    entry: StreamEntry = {"name": name}
    config, consumers = raw.get("config"), raw.get("consumers")
    messages, digest, floor = raw.get("messages"), raw.get("sha256"), raw.get("source_floor")
    if isinstance(config, dict):
        entry["config"] = config
    if isinstance(consumers, list):
        entry["consumers"] = [c for c in consumers if isinstance(c, dict)]
    if isinstance(messages, int):
        entry["messages"] = messages
    if isinstance(digest, str):
        entry["sha256"] = digest
    if isinstance(floor, int):
        entry["source_floor"] = floor
    bad = [k for k, v in (("config", config), ("consumers", consumers), ("messages", messages),
                          ("sha256", digest), ("source_floor", floor))
           if v is not None and k not in entry]
    if bad:
        raise BackupError(f"{path}: stream {name}: {', '.join(bad)} not as a backup writes it")
    return entry


def verified_manifest(folder: Path) -> Manifest:
    """The manifest, once every stream file it names is checked whole against it."""
    manifest = read_manifest(folder)
    for stream in manifest["streams"]:
        _verify(stream_file(folder, stream["name"]), stream, manifest["format"])
    return manifest


def _verify(path: Path, stream: StreamEntry, fmt: int) -> None:
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
