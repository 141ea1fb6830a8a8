"""Pure parts of the router's partitions (server/partitions.py, subjects.py): which partition an
execution is in, which server prefers which partition, and the subjects of router copies."""

from __future__ import annotations

from collections import Counter

from nats.aio.msg import Msg

from noetl_stream.server.partitions import origin_sequence, partition_of, preferred_servers
from noetl_stream.subjects import load_topology

SERVERS = [f"host-{n}-abc{n}" for n in range(5)]


def test_partition_of_is_fnv1a_of_the_execution_id() -> None:
    # FNV-1a 32-bit reference values: "" -> 0x811c9dc5, "a" -> 0xe40c292c, "foobar" -> 0xbf9cf968.
    assert partition_of("", 2**31) == 0x811C9DC5 % 2**31
    assert partition_of("a", 1000) == 0xE40C292C % 1000
    assert partition_of("foobar", 16) == 0xBF9CF968 % 16


def test_every_partition_has_one_preferred_server_and_loads_are_even() -> None:
    for n in range(1, 6):
        chosen = preferred_servers(16, SERVERS[:n])
        assert sorted(chosen) == list(range(16))
        load = Counter(chosen.values())
        assert set(load) == set(SERVERS[:n])
        assert max(load.values()) <= -(-16 // n)


def test_every_server_computes_the_same_preference_whatever_the_order() -> None:
    assert preferred_servers(16, SERVERS[:3]) == preferred_servers(16, list(reversed(SERVERS[:3])))


def test_a_server_joining_takes_partitions_only_for_itself() -> None:
    before = preferred_servers(16, SERVERS[:2])
    after = preferred_servers(16, SERVERS[:3])
    moved = [p for p in range(16) if before[p] != after[p]]
    assert all(after[p] == SERVERS[2] for p in moved)
    assert 4 <= len(moved) <= 6


def test_no_server_no_preference() -> None:
    assert preferred_servers(16, []) == {}


def test_a_router_copy_reads_as_the_event_it_copies() -> None:
    topo = load_topology()
    assert topo.published_subject("noetl.router.7.ex1.step.done") == "noetl.events.ex1.step.done"
    assert topo.event_type_of("noetl.router.7.ex1.signal.payment.settled") == \
        "signal.payment.settled"
    assert topo.event_type_of("noetl.events.ex1.loop.iteration.done") == "loop.iteration.done"
    assert topo.published_subject("noetl.events.ex1.step.done") == "noetl.events.ex1.step.done"


def test_the_router_stream_copies_what_the_router_acts_on_into_partitions() -> None:
    topo = load_topology()
    router = topo.router_decl()
    stream = next(s for s in topo.streams if s.name == router.stream)
    assert stream.source == "NOETL_EVENTS" and stream.subjects == ()
    assert ("noetl.events.*.signal.>",
            "noetl.router.{{partition(16,1)}}.{{wildcard(1)}}.signal.>") in stream.transforms
    assert router.consumer(3).filter_subjects == ("noetl.router.3.>",)
    assert len({c.durable for c in router.consumers()}) == router.partitions


def test_origin_sequence_of_a_copy_is_the_events_stream_sequence() -> None:
    copy = Msg(None, subject="noetl.router.1.ex1.step.done",  # type: ignore[arg-type]
               headers={"Nats-Stream-Source": "NOETL_EVENTS 4711 f d noetl.events.ex1.step.done x"})
    assert origin_sequence(copy) == 4711
    assert origin_sequence(Msg(None, subject="x")) is None  # type: ignore[arg-type]
