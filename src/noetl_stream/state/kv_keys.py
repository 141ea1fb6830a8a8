"""Listing the keys of a KV bucket without a watcher.

One stream-info request with a subject filter names every subject the bucket's stream holds
(deleted keys included; their reads say so). It is deterministic, unlike `kv.keys()`, whose watcher
can stop early on a busy server and return part of the list.
"""

from __future__ import annotations

from nats.js import JetStreamContext


async def bucket_keys(js: JetStreamContext, bucket: str, pattern: str = ">") -> list[str]:
    """Every key of `bucket` matching the subject pattern `pattern`, sorted."""
    prefix = f"$KV.{bucket}."
    info = await js.stream_info(f"KV_{bucket}", subjects_filter=prefix + pattern)
    subjects = info.state.subjects or {}
    return sorted(subject[len(prefix):] for subject in subjects)
