"""Copies NOETL_ROUTER made again (server/source_copies.py): which events of a group the server
applies, and the mark the state keeps of them. Pure: the messages are built as nats-py builds
a delivery (the ack subject carries the NOETL_ROUTER sequence)."""

from __future__ import annotations

from typing import Any

from nats.aio.msg import Msg

from noetl_stream.router.state import ExecutionState
from noetl_stream.server.source_copies import RECENT, Copy, copy_of, fresh_items, sort_out
from noetl_stream.server.state_diff import content


def delivery(origin: int | None, copy: int, delivered: int = 1) -> Msg:
    """A copy of NOETL_EVENTS sequence `origin` stored at NOETL_ROUTER sequence `copy`."""
    headers = None if origin is None else {
        "Nats-Stream-Source": f"NOETL_EVENTS {origin} f d noetl.events.ex1.step.done.default"}
    reply = f"$JS.ACK.NOETL_ROUTER.noetl-router-3.{delivered}.{copy}.{copy}.1764170000000000000.0"
    return Msg(None, subject="noetl.router.3.ex1.step.done.default",  # type: ignore[arg-type]
               reply=reply, headers=headers)


def state(mark: list[int] | None = None, recent: list[int] | None = None) -> ExecutionState:
    s = ExecutionState(execution_id="ex1", playbook_key="pb_x", workload={})
    s.source_mark = list(mark or [])
    s.source_recent = list(recent if recent is not None else mark[:1] if mark else [])
    return s


def test_a_copy_names_its_origin_and_its_own_sequence() -> None:
    assert copy_of(delivery(4711, 90)) == Copy(4711, 90)
    # No source header: the sequence of the router's own stream is no origin, never skipped.
    assert copy_of(delivery(None, 90)) is None
    assert copy_of(Msg(None, subject="x")) is None  # type: ignore[arg-type]


def test_copies_made_again_after_a_restart_are_skipped_and_new_events_applied() -> None:
    s = state()
    assert sort_out(s, [Copy(10, 100), Copy(12, 102)]) == [True, True]
    assert (s.source_mark, s.source_recent) == ([12, 102], [10, 12])
    # nats-server restarted and copied 10 and 12 again (new NOETL_ROUTER sequences), then 14.
    assert sort_out(s, [Copy(10, 200), Copy(12, 201), Copy(14, 202)]) == [False, False, True]
    assert s.source_mark == [14, 202]
    # A second restart copies all three again.
    assert sort_out(s, [Copy(10, 300), Copy(12, 301), Copy(14, 302)]) == [False, False, False]
    assert s.source_mark == [14, 202]


def test_an_earlier_event_that_comes_late_is_still_applied() -> None:
    # 10 went back (its group failed, or its server died) while 12 was applied: its first copy
    # precedes 12's, so it is no second copy. A plain high-water mark would drop it.
    s = state([12, 102])
    assert sort_out(s, [Copy(10, 100)]) == [True]
    assert s.source_mark == [12, 102]


def test_the_last_applied_event_delivered_again_is_skipped_however_it_was_copied() -> None:
    # Its ack was lost, or its first copy came back after a second copy of it was applied.
    assert sort_out(state([12, 102]), [Copy(12, 102)]) == [False]
    assert sort_out(state([12, 250]), [Copy(12, 102)]) == [False]
    assert sort_out(state([12, 250], recent=[]), [Copy(12, 102)]) == [False]


def test_a_first_copy_that_comes_back_after_its_second_copy_was_applied_is_skipped() -> None:
    # 248 and 256 were copied (at 80, 81) and in hand when nats-server went down; it copied them
    # again (at 90, 91), and those were applied before the first copies' leases ran out.
    s = state([236, 70])
    assert sort_out(s, [Copy(248, 90), Copy(256, 91)]) == [True, True]
    assert sort_out(s, [Copy(248, 80), Copy(256, 81)]) == [False, False]
    assert s.source_mark == [256, 91]


def test_the_recent_origins_are_bounded() -> None:
    s = state()
    sort_out(s, [Copy(n, 1000 + n) for n in range(1, 2 * RECENT + 1)])
    assert s.source_recent == list(range(RECENT + 1, 2 * RECENT + 1))
    assert s.source_mark == [2 * RECENT, 1000 + 2 * RECENT]


def test_a_copy_made_again_within_the_same_group_is_skipped() -> None:
    s = state()
    assert sort_out(s, [Copy(10, 100), Copy(10, 140), Copy(11, 141)]) == [True, False, True]
    assert s.source_mark == [11, 141]


def test_a_state_without_a_mark_applies_every_copy() -> None:
    # Written before the mark existed: as before, nothing is skipped.
    old = ExecutionState.from_dict({"execution_id": "ex1", "playbook_key": "pb_x"})
    assert old.source_mark == []
    assert (old.source_mark, old.source_recent) == ([], [])
    assert sort_out(old, [Copy(3, 300)]) == [True]
    assert (old.source_mark, old.source_recent) == ([3, 300], [3])


def test_messages_without_an_origin_are_applied_and_leave_the_mark() -> None:
    s = state([12, 102])
    assert sort_out(s, [None, None]) == [True, True]
    assert s.source_mark == [12, 102]


def test_fresh_items_keeps_the_order_and_the_events_of_the_fresh_copies() -> None:
    s = state([12, 102])
    items: list[tuple[Msg, Any]] = [(delivery(10, 200), {"n": 10}), (delivery(12, 201), {"n": 12}),
                                    (delivery(13, 203), {"n": 13}), (delivery(None, 204), {"n": 0})]
    assert [e for _, e in fresh_items(s, items)] == [{"n": 13}, {"n": 0}]
    assert s.source_mark == [13, 203]


def test_the_mark_is_stored_and_read_back_and_left_out_of_verify() -> None:
    s = state([13, 203], recent=[12, 13])
    again = ExecutionState.from_dict(s.to_dict())
    assert (again.source_mark, again.source_recent) == ([13, 203], [12, 13])
    assert content(again) == content(state())


def reference_sort_out(mark: list[int], recent: list[int], copies: list[Copy | None]
                       ) -> tuple[list[bool], list[int], list[int]]:
    """The rule as the module's docstring states it, with a set of every origin seen so far."""
    last = Copy(mark[0], mark[1]) if len(mark) == 2 else None
    seen, kept, fresh = set(recent), list(recent), []
    for c in copies:
        again = c is not None and (c.origin in seen or (last is not None and (
            c.origin == last.origin or (c.origin < last.origin and c.copy > last.copy))))
        fresh.append(not again)
        if again or c is None:
            continue
        seen.add(c.origin)
        kept.append(c.origin)
        if last is None or c.origin > last.origin:
            last = c
    if last is None:
        return fresh, mark, recent
    return fresh, [last.origin, last.copy], kept[-RECENT:]


def test_sorting_out_groups_follows_the_rule_over_many_groups() -> None:
    # Deterministic pseudo-random groups: redelivered, repeated and late copies mixed in.
    s, seed = state(), 7
    for _ in range(400):
        copies: list[Copy | None] = []
        for _ in range(1 + seed % 5):
            seed = (seed * 1103515245 + 12345) % (1 << 31)
            copies.append(None if seed % 17 == 0 else Copy(seed % 300, seed % 1000))
        want = reference_sort_out(list(s.source_mark), list(s.source_recent), copies)
        assert (sort_out(s, copies), s.source_mark, s.source_recent) == want
    assert len(s.source_recent) == RECENT
