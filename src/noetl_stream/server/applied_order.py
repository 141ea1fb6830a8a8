"""The order the server applied an execution's events in, as far as its committed state tells.

The server applies the events NOETL_ROUTER copies in the order they come, and that is not always
the order NOETL_EVENTS stored them in: a group whose commit failed is handed back for redelivery
while the execution's later events go on (server/server.py), and an event a server died holding
comes back after its lease (server/source_copies.py). The router is not indifferent to the
order: an outcome that comes after the execution ended counts for nothing, one that comes before
counts as an applied event. A rebuild in stream order then differs from the committed state
although the server did nothing wrong.

The committed state names the NOETL_EVENTS sequences (origins) of the last
source_copies.RECENT copies it applied, in the order it applied them (`source_recent`). The
events of the log it names are put in that order, each in one of the places those events hold
in the log; every other event keeps its place. A state without marks (written before they
existed), or a log read without its sequences, keeps the stream order. An execution that applied
more copies than RECENT may have applied its older ones out of order as well: those stay in
stream order.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

from noetl_stream.jsonutil import JsonObject


def in_applied_order(events: Sequence[JsonObject], origins: Sequence[int | None],
                     recent: Sequence[int]) -> list[JsonObject]:
    """`events` (a log in stream order, `origins[i]` the NOETL_EVENTS sequence of `events[i]`)
    with those whose origin `recent` names in the order `recent` lists them.
    """
    if len(origins) != len(events):
        raise ValueError(f"{len(events)} events but {len(origins)} sequences")
    rank = {origin: i for i, origin in enumerate(recent)}
    # (place in the applied order, place in the log) of each event the state names
    named = sorted((rank[origin], i) for i, origin in enumerate(origins)
                   if origin is not None and origin in rank)
    ordered = list(events)
    for place, (_, source) in zip(sorted(i for _, i in named), named, strict=True):
        ordered[place] = events[source]
    return ordered
