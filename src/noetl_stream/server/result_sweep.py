"""Removing result objects no execution still kept can refer to (object store `noetl_results`).

Objects are named by their content hash, so two executions producing the same bytes share one
object and no object has an owner to be purged with. The store therefore has no age limit (a
running execution may read an object at any time) and the retention sweep removes an object once
it is certain that no execution still kept refers to it:

- every execution refers only to objects written, or re-written, after it started, less
  `REFRESH_S`: `ResultStore.put_bytes` writes an existing object again when its last write is
  older than that (state/results.py), instead of reusing it;
- so an object whose last write is older than the start of every execution that still has a
  state, less `REFRESH_S`, is referred to by none, and goes.

An execution started after the sweep read the states writes or refreshes what it refers to, and
a refresh racing the removal lands under a new chunk id and a newer meta message: the removal
purges only the meta message and chunks it saw.
"""

from __future__ import annotations

import base64
import logging

from nats.js.errors import NotFoundError

from noetl_stream import jsonutil
from noetl_stream.bus.connection import Bus
from noetl_stream.refs import RESULTS_STORE
from noetl_stream.state.results import REFRESH_S

log = logging.getLogger("noetl_stream.retention")

_STREAM = f"OBJ_{RESULTS_STORE}"
_META = f"$O.{RESULTS_STORE}.M."
_CHUNKS = f"$O.{RESULTS_STORE}.C."


async def purge_unreferenced_objects(bus: Bus, *, oldest_start: float,
                                     refresh_s: float = REFRESH_S) -> int:
    """Remove the objects last written before `oldest_start - refresh_s`; how many went.
    `oldest_start`: the earliest start of the executions that still have a state (now, if none).
    """
    js = bus.js
    try:
        info = await js.stream_info(_STREAM, subjects_filter=_META + ">")
    except NotFoundError:
        return 0
    before = oldest_start - refresh_s
    removed = 0
    for subject in sorted(info.state.subjects or {}):
        try:
            msg = await js.get_msg(_STREAM, subject=subject)
        except NotFoundError:
            continue
        if msg.time is None or msg.time.timestamp() >= before or msg.seq is None:
            continue
        nuid = _nuid_of(msg.data)
        # Only the meta message read (and those before it): a refresh after it stays.
        await js.purge_stream(_STREAM, subject=subject, seq=msg.seq + 1)
        if nuid:
            await js.purge_stream(_STREAM, subject=_CHUNKS + nuid)
        removed += 1
        log.debug("retention: result object %s removed",
                  base64.urlsafe_b64decode(subject[len(_META):]).decode(errors="replace"))
    return removed


def _nuid_of(meta: bytes | None) -> str | None:
    try:
        nuid = jsonutil.loads(meta or b"{}").get("nuid")
    except ValueError:
        return None
    return nuid if isinstance(nuid, str) and nuid else None
