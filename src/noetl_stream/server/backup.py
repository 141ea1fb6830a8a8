"""Backing up and restoring everything noetl-stream keeps in NATS, through the JetStream API.

What is state: the streams of subjects/topology.yaml (requests, commands, events, dead letters,
advisories), the KV buckets (`KV_<bucket>`: executions, catalog, vars, credentials, users, ...)
and the object stores (`OBJ_<store>`: large results), with the durable consumers on them.

A backup is a folder: `manifest.json` (format version, when, and per stream its configuration as
JetStream reports it, its durable consumers and how far each has acknowledged, how many messages
its file holds and the file's SHA-256) and one `streams/<name>.jsonl` per stream, one message per
line: `{seq, subject, time, hdrs, data}` with headers and body base64-encoded as JetStream returns
them. A restore checks every file against the manifest before it creates anything
(server/backup_files.py), and removes what it created if it fails on the way.

Restore replays each stream's messages, in order, into a NATS that has none of these streams yet,
with their subjects and headers (less the `Nats-Expected-*` checks, which held for the original
sequence numbers). Sequence numbers are new, so each durable consumer is created to start at the
first restored message its original had not acknowledged: a waiting execution resumes, and work in
flight at backup time is delivered again (at least once, as after any crash). Restored messages
get new timestamps, so per-message TTLs and max ages count from the restore.

The router's stream (NOETL_ROUTER) is a copy of events, made by the events stream's sourcing: a
backup keeps no messages of it, only from which event on it had not applied them (`source_floor`,
an events stream sequence); the restore creates it copying the restored events stream from the
first restored event at or after that one.
"""

from __future__ import annotations

import base64
import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from noetl_stream.bus.connection import Bus
from noetl_stream.bus.js_api import js_request
from noetl_stream.errors import InfrastructureError
from noetl_stream.jsonutil import JsonObject, JsonValue
from noetl_stream.server.backup_files import (
    FORMAT,
    MessageWriter,
    StreamEntry,
    stream_file,
    verified_manifest,
)

API_TIMEOUT_S = 10.0
# Checks that held against the original stream's sequence numbers, not the restored one's.
_DROPPED_HEADER_PREFIXES = ("nats-expected-",)


@dataclass
class StreamCopy:
    name: str
    messages: int
    consumers: int


def state_streams(bus: Bus) -> list[str]:
    """The streams that hold noetl-stream's state, in the order a restore creates them."""
    topo = bus.topology
    return ([s.name for s in topo.streams] + [f"KV_{b.name}" for b in topo.buckets]
            + [f"OBJ_{o.name}" for o in topo.object_stores])


async def _api(bus: Bus, subject: str, body: JsonObject | None = None) -> JsonObject:
    return await js_request(bus, subject, body, timeout_s=API_TIMEOUT_S)


def _object(value: JsonValue) -> JsonObject:
    """A part of a JetStream answer that is an object; an empty one where the answer has none."""
    return value if isinstance(value, dict) else {}


def _objects(value: JsonValue) -> list[JsonObject]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _int(value: JsonValue) -> int:
    """A count or sequence number of a JetStream answer: 0 where it has none."""
    if value is None:
        return 0
    if isinstance(value, (int, float, str)):
        return int(value)
    raise InfrastructureError(f"JetStream answered {value!r} where a number belongs")


def _error_code(answer: JsonObject) -> int | None:
    error = answer.get("error")
    return _int(error.get("err_code", 0)) if isinstance(error, dict) else None


def _check(answer: JsonObject, what: str) -> JsonObject:
    if "error" in answer:
        error = answer["error"]
        raise InfrastructureError(f"{what}: {_object(error).get('description', error)}")
    return answer


STREAM_NOT_FOUND = 10059
NO_MESSAGE_FOUND = 10037


async def _stream_info(bus: Bus, name: str) -> JsonObject | None:
    answer = await _api(bus, f"STREAM.INFO.{name}")
    if _error_code(answer) == STREAM_NOT_FOUND:
        return None
    return _check(answer, f"stream {name}")


async def _durables(bus: Bus, stream: str) -> list[JsonObject]:
    answer = _check(await _api(bus, f"CONSUMER.LIST.{stream}", {"offset": 0}), f"consumers of {stream}")
    return [c for c in _objects(answer.get("consumers")) if _object(c.get("config")).get("durable_name")]


async def backup(bus: Bus, folder: Path, *, on_stream: Callable[[StreamCopy], None] | None = None,
                 ) -> list[StreamCopy]:
    """Write every state stream that exists, with its durable consumers, to `folder`."""
    (folder / "streams").mkdir(parents=True, exist_ok=True)
    streams: list[JsonValue] = []
    manifest: JsonObject = {"format": FORMAT, "created_at": time.time(),
                            "prefix": bus.topology.prefix, "streams": streams}
    copies = []
    for name in state_streams(bus):
        info = await _stream_info(bus, name)
        if info is None:
            continue  # never provisioned here (an object store nobody used yet)
        consumers: list[JsonValue] = [
            {"config": c["config"], "ack_floor": _object(c.get("ack_floor")).get("stream_seq", 0)}
            for c in await _durables(bus, name)]
        entry: JsonObject = {"name": name, "config": info["config"], "consumers": consumers}
        with stream_file(folder, name).open("wb") as out:
            writer = MessageWriter(out)
            if _object(info["config"]).get("sources"):
                entry["source_floor"] = await _source_floor(bus, name, info)
            else:
                await _write_messages(bus, name, info, writer)
        count = entry["messages"] = writer.count
        entry["sha256"] = writer.sha256
        streams.append(entry)
        copy = StreamCopy(name, count, len(consumers))
        copies.append(copy)
        if on_stream is not None:
            on_stream(copy)
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return copies


async def _source_floor(bus: Bus, name: str, info: JsonObject) -> int:
    """The sequence in the source stream of the first message a copying stream still holds (its
    messages are the router's work not yet acknowledged); when it holds none, the first one it
    has not copied yet.
    """
    state = _object(info.get("state"))
    first = _int(state.get("first_seq", 0))
    if _int(state.get("messages", 0)) > 0:
        answer = await _api(bus, f"STREAM.MSG.GET.{name}", {"seq": first, "next_by_subj": ">"})
        if _error_code(answer) != NO_MESSAGE_FOUND:
            hdrs = _object(_check(answer, f"stream {name}")["message"]).get("hdrs")
            headers = parse_headers(hdrs if isinstance(hdrs, str) else None)
            origin = headers.get("Nats-Stream-Source", "").split(" ")
            if len(origin) > 1 and origin[1].isdigit():
                return int(origin[1])
    source = next(iter(_objects(_object(info["config"]).get("sources"))), {})
    source_info = await _stream_info(bus, str(source.get("name")))
    last = _int(_object((source_info or {}).get("state")).get("last_seq", 0))
    lag = next((_int(s.get("lag", 0)) for s in _objects(info.get("sources"))), 0)
    return last - lag + 1


async def _write_messages(bus: Bus, name: str, info: JsonObject,
                          writer: MessageWriter) -> None:
    state = _object(info.get("state"))
    seq, last = _int(state.get("first_seq", 1)), _int(state.get("last_seq", 0))
    while seq <= last:
        # The next message at or after `seq`: deleted ones and gaps are skipped.
        answer = await _api(bus, f"STREAM.MSG.GET.{name}", {"seq": seq, "next_by_subj": ">"})
        if _error_code(answer) == NO_MESSAGE_FOUND:
            break
        msg = _object(_check(answer, f"stream {name} message {seq}")["message"])
        writer.write({"seq": msg["seq"], "subject": msg["subject"], "time": msg.get("time"),
                      "hdrs": msg.get("hdrs"), "data": msg.get("data")})
        seq = _int(msg["seq"]) + 1


def parse_headers(hdrs: str | None) -> dict[str, str]:
    """Base64 `NATS/1.0` header block -> a dict, without the checks a restore must not repeat."""
    if not hdrs:
        return {}
    lines = base64.b64decode(hdrs).decode().split("\r\n")[1:]
    headers = {}
    for line in lines:
        key, sep, value = line.partition(":")
        if sep and not key.strip().lower().startswith(_DROPPED_HEADER_PREFIXES):
            headers[key.strip()] = value.strip()
    return headers


async def restore(bus: Bus, folder: Path, *, replicas: int | None = None,
                  on_stream: Callable[[StreamCopy], None] | None = None) -> list[StreamCopy]:
    """Recreate the streams of the backup in `folder` with their messages and durable consumers.
    Refuses (ValueError) when one of them exists already: a restore never merges; and
    (BackupError) when a file does not match the manifest, before anything is written. A restore
    that fails on the way deletes the streams it created, so none is left half-restored.
    """
    manifest = verified_manifest(folder)
    present = [s["name"] for s in manifest["streams"] if await _stream_info(bus, s["name"]) is not None]
    if present:
        raise ValueError(f"this NATS has {', '.join(present)} already; restore into one without "
                         "noetl-stream's streams (a fresh server, or delete them first)")
    copies: list[StreamCopy] = []
    renumbering: dict[str, list[tuple[int, int]]] = {}
    try:
        for stream in manifest["streams"]:
            if "source_floor" in stream:
                copy = await _restore_copy(bus, stream, replicas, renumbering)
            else:
                copy, renumbering[stream["name"]] = await _restore_stream(bus, folder, stream,
                                                                          replicas)
            copies.append(copy)
            if on_stream is not None:
                on_stream(copy)
    except Exception:
        await _delete_streams(bus, [s["name"] for s in manifest["streams"]])
        raise
    return copies


async def _delete_streams(bus: Bus, names: list[str]) -> None:
    """Deletes whichever of `names` exist (a stream whose creation failed may not)."""
    for name in reversed(names):
        # Best effort: the restore's own error is the one to report.
        with contextlib.suppress(Exception):
            await _api(bus, f"STREAM.DELETE.{name}")


async def _restore_copy(bus: Bus, stream: StreamEntry, replicas: int | None,
                        renumbering: dict[str, list[tuple[int, int]]]) -> StreamCopy:
    """A stream that copies another one (the router's): copying starts at the restored message
    of the first one the original had not applied.
    """
    name = stream["name"]
    config = dict(stream["config"])
    if replicas is not None:
        config["num_replicas"] = replicas
    floor = int(stream["source_floor"])
    sources: list[JsonValue] = []
    for source in _objects(config.get("sources")):
        restored = renumbering.get(str(source.get("name")), [])
        after = [new for old, new in restored if old >= floor]
        start = after[0] if after else (restored[-1][1] + 1 if restored else 1)
        sources.append({**source, "opt_start_seq": start})
    config["sources"] = sources
    _check(await _api(bus, f"STREAM.CREATE.{name}", config), f"creating stream {name}")
    for consumer in stream["consumers"]:
        await _restore_consumer(bus, name, consumer, [])
    return StreamCopy(name, 0, len(stream["consumers"]))


async def _restore_stream(bus: Bus, folder: Path, stream: StreamEntry,
                          replicas: int | None) -> tuple[StreamCopy, list[tuple[int, int]]]:
    name = stream["name"]
    config = dict(stream["config"])
    if replicas is not None:
        config["num_replicas"] = replicas
    config.pop("sealed", None)
    _check(await _api(bus, f"STREAM.CREATE.{name}", config), f"creating stream {name}")
    renumbered: list[tuple[int, int]] = []  # (original seq, restored seq), in order
    with stream_file(folder, name).open() as lines:
        for line in lines:
            msg = json.loads(line)
            data = base64.b64decode(msg["data"]) if msg.get("data") else b""
            ack = await bus.js.publish(msg["subject"], data, stream=name,
                                       headers=parse_headers(msg.get("hdrs")) or None)
            renumbered.append((int(msg["seq"]), int(ack.seq)))
    # A work queue keeps only what is not acknowledged yet: its consumers start at the first.
    work_queue = config.get("retention") == "workqueue"
    for consumer in stream["consumers"]:
        await _restore_consumer(bus, name, consumer, [] if work_queue else renumbered)
    return StreamCopy(name, len(renumbered), len(stream["consumers"])), renumbered


async def _restore_consumer(bus: Bus, stream: str, consumer: JsonObject,
                            renumbered: list[tuple[int, int]]) -> None:
    """The durable, starting at the first restored message after its original ack floor
    (`renumbered` empty: as it was configured).
    """
    config = dict(_object(consumer["config"]))
    if renumbered:
        floor = _int(consumer.get("ack_floor"))
        after = [new for old, new in renumbered if old > floor]
        start = after[0] if after else renumbered[-1][1] + 1
        config.update(deliver_policy="by_start_sequence", opt_start_seq=start)
    durable = config["durable_name"]
    _check(await _api(bus, f"CONSUMER.CREATE.{stream}.{durable}",
                      {"stream_name": stream, "config": config}),
           f"creating consumer {stream}/{durable}")

