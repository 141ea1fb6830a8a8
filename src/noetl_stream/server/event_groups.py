"""A batch of a router partition's events, grouped by the execution each is for."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from nats.aio.msg import Msg

from noetl_stream.bus.signals import decode_event
from noetl_stream.server.partitions import origin_sequence
from noetl_stream.subjects import Topology


def by_execution(topology: Topology, msgs: list[Msg]) -> dict[str, list[tuple[Msg, Any]]]:
    """The events of a batch by execution, in the order they came; one that is refused makes a
    group of its own (under the empty id, which no execution has) with its exception, settled
    as dispositions.py says.
    """
    groups: dict[str, list[tuple[Msg, Any]]] = defaultdict(list)
    for m in msgs:
        try:
            # Checked against its subject; signals carry a client's data, never an envelope.
            event = decode_event(topology, m.subject, m.data, origin_sequence(m))
        except Exception as exc:  # Malformed, or a bug: either is settled alone
            groups[""].append((m, exc))
            continue
        groups[event.execution_id].append((m, event))
    return groups
