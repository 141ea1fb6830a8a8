"""A state rebuilt from its log in the order the server applied the events (server/applied_order.py):
a duplicate outcome stored before the execution's last outcome but applied after it (its group
handed back for redelivery while the last outcome went on) counts for nothing on the server; in
stream order it counts, and the last outcome is then past the committed count."""

from __future__ import annotations

from typing import Any

from unit_helpers import parse

from noetl_stream.router.state import ExecutionState, Outgoing
from noetl_stream.server.applied_order import in_applied_order
from noetl_stream.server.replay import rebuild
from noetl_stream.server.source_copies import Copy, sort_out
from noetl_stream.server.state_diff import content, first_difference
from noetl_stream.subjects import load_topology
from noetl_stream.testing.router_harness import Reply, RouterHarness, outcome_event

PLAYBOOK = parse("""
    workflow:
      - step: start
        tool: {kind: python, code: "result = 1"}
        next: after
      - step: after
        tool: {kind: python, code: "result = 2"}
""")
TOPOLOGY = load_topology()


class Server(RouterHarness):
    """The router as the server drives it, with the log NOETL_EVENTS holds (each event with its
    sequence) and the marks the server sets on the state for each copy it applies.
    """

    def __init__(self) -> None:
        self.log: list[dict[str, Any]] = []
        self.origins: list[int] = []
        super().__init__(PLAYBOOK, now=1000.0)

    def store(self, event: dict[str, Any]) -> int:
        self.log.append(event)
        self.origins.append(len(self.log))
        return len(self.log)

    def _collect(self, outbox: list[Outgoing]) -> None:
        super()._collect(outbox)
        for m in outbox:
            if m.kind == "event":
                self.store({**m.body, "event_id": m.msg_id})

    def apply_copy(self, event: dict[str, Any], origin: int) -> None:
        state: ExecutionState = self.state
        assert sort_out(state, [Copy(origin, origin)]) == [True]
        self.send(event)


def test_a_duplicate_stored_before_the_last_outcome_and_applied_after_it_rebuilds_the_state() -> None:
    server = Server()
    first = outcome_event(server.pending_for("start")[0], Reply(result=1))
    server.apply_copy(first, server.store({**first, "timestamp": 1001.5}))
    # A copy of the first outcome under a new msg id is stored, then the last outcome. The
    # group holding the copy is handed back; the last outcome ends the execution, then the copy
    # comes again and changes nothing.
    copy = server.store({**first, "timestamp": 1001.6})
    last = outcome_event(server.pending_for("after")[0], Reply(result=2))
    last_origin = server.store({**last, "timestamp": 1002.5})
    server.apply_copy(last, last_origin)
    server.apply_copy(first, copy)
    committed = server.state
    assert committed.status == "completed" and committed.applied == 2

    in_stream_order = rebuild(PLAYBOOK, server.log, TOPOLOGY, playbook_key=committed.playbook_key,
                              applied=committed.applied)
    as_applied = rebuild(PLAYBOOK, server.log, TOPOLOGY, playbook_key=committed.playbook_key,
                         applied=committed.applied, origins=server.origins,
                         recent=committed.source_recent)

    assert in_stream_order is not None and as_applied is not None
    difference = first_difference(content(committed), content(in_stream_order.state))
    assert difference is not None
    assert difference.describe() == 'status: committed "completed", rebuilt from events "running"'
    assert first_difference(content(committed), content(as_applied.state)) is None


def test_events_the_marks_do_not_name_keep_their_places() -> None:
    events: list[dict[str, Any]] = [{"n": n} for n in range(6)]
    origins: list[int | None] = [None, 11, 12, 13, 14, 15]

    ordered = in_applied_order(events, origins, [11, 14, 12])

    assert [e["n"] for e in ordered] == [0, 1, 4, 3, 2, 5]
    assert in_applied_order(events, origins, []) == events  # a state written before the marks
    assert in_applied_order(events, origins, [11, 12, 13]) == events
