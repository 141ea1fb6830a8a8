"""Execution ids as NoETL issues them: decimal positive int64s, strictly increasing per generator,
disjoint between generators of different nodes; derived ids deterministic and numeric too."""

from __future__ import annotations

import itertools
import re

import pytest

from noetl_stream import ids
from noetl_stream.errors import InfrastructureError
from noetl_stream.messages import ExecutionRequest
from noetl_stream.server import execution_ids
from noetl_stream.server.execution_ids import (
    EPOCH_MS,
    MAX_NODE,
    MAX_SEQUENCE,
    TIME_BITS,
    ExecutionIdGenerator,
    issued_at_ms,
    new_execution_id,
    node_of,
)

INT64_MAX = 2**63 - 1
NOW_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


class FixedClock:
    """A clock the test moves by hand (milliseconds since the Unix epoch)."""

    def __init__(self, ms: int = NOW_MS) -> None:
        self.ms = ms

    def __call__(self) -> int:
        return self.ms


def is_int64_text(text: str) -> bool:
    return re.fullmatch(r"[1-9][0-9]{0,18}", text) is not None and 0 < int(text) <= INT64_MAX


def test_new_execution_id_is_the_decimal_text_of_a_positive_int64() -> None:
    issued = [new_execution_id() for _ in range(1000)]
    assert all(is_int64_text(i) for i in issued), issued[:3]
    # What today's validation asks of any id: a NATS subject token.
    ExecutionRequest(execution_id=issued[0], playbook="x")


def test_new_execution_ids_of_a_process_strictly_increase() -> None:
    issued = [int(new_execution_id()) for _ in range(10_000)]
    assert all(a < b for a, b in itertools.pairwise(issued))


def test_generator_lays_out_time_node_and_sequence_like_noetl() -> None:
    clock = FixedClock()
    generator = ExecutionIdGenerator(42, clock_ms=clock, sequence_start=lambda: 7)
    first = generator.next_id()
    assert first == ((NOW_MS - EPOCH_MS) << 22) | (42 << 12) | 7
    assert issued_at_ms(first) == NOW_MS and node_of(first) == 42


def test_ids_increase_within_a_millisecond_and_when_the_clock_steps_back() -> None:
    clock = FixedClock()
    generator = ExecutionIdGenerator(1, clock_ms=clock, sequence_start=lambda: 0)
    same_ms = [generator.next_id() for _ in range(3)]
    clock.ms -= 5_000  # NTP steps the clock back
    after_step_back = generator.next_id()
    clock.ms += 10_000
    later = generator.next_id()
    issued = [*same_ms, after_step_back, later]
    assert issued == sorted(set(issued))
    assert issued_at_ms(after_step_back) == NOW_MS  # never a time before an id already issued


def test_a_used_up_millisecond_borrows_the_next_instead_of_repeating() -> None:
    clock = FixedClock()
    generator = ExecutionIdGenerator(3, clock_ms=clock, sequence_start=lambda: 0)
    issued = [generator.next_id() for _ in range(MAX_SEQUENCE + 1 + 10)]
    assert issued == sorted(set(issued))
    assert issued_at_ms(issued[MAX_SEQUENCE]) == NOW_MS
    assert issued_at_ms(issued[MAX_SEQUENCE + 1]) == NOW_MS + 1


def test_two_generators_with_different_nodes_never_issue_the_same_id() -> None:
    clock = FixedClock()  # the worst case: both issue in the very same milliseconds
    a = ExecutionIdGenerator(5, clock_ms=clock, sequence_start=lambda: 0)
    b = ExecutionIdGenerator(6, clock_ms=clock, sequence_start=lambda: 0)
    from_a, from_b = set(), set()
    for tick in range(20):
        clock.ms = NOW_MS + tick
        from_a |= {a.next_id() for _ in range(300)}
        from_b |= {b.next_id() for _ in range(300)}
    assert len(from_a) == len(from_b) == 6000
    assert not from_a & from_b


def test_ids_stay_within_int64_up_to_the_last_millisecond_of_the_time_bits() -> None:
    last_ms = EPOCH_MS + (1 << TIME_BITS) - 1
    generator = ExecutionIdGenerator(MAX_NODE, clock_ms=FixedClock(last_ms),
                                     sequence_start=lambda: MAX_SEQUENCE)
    assert generator.next_id() == INT64_MAX
    with pytest.raises(InfrastructureError, match="2093"):
        generator.next_id()  # the sequence is used up and there is no next millisecond


def test_a_clock_before_2024_is_an_error_not_a_negative_id() -> None:
    generator = ExecutionIdGenerator(0, clock_ms=FixedClock(EPOCH_MS - 1))
    with pytest.raises(InfrastructureError, match="before 2024"):
        generator.next_id()


def test_node_outside_ten_bits_is_refused() -> None:
    with pytest.raises(ValueError, match=r"0\.\.1023"):
        ExecutionIdGenerator(MAX_NODE + 1)


def test_process_node_comes_from_the_environment_when_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(execution_ids, "_generator", None)
    monkeypatch.setenv("NOETL_STREAM_NODE_ID", "513")
    assert node_of(int(new_execution_id())) == 513


@pytest.mark.parametrize("raw", ["1024", "-1", "one"])
def test_a_bad_node_in_the_environment_is_an_error(monkeypatch: pytest.MonkeyPatch,
                                                   raw: str) -> None:
    monkeypatch.setattr(execution_ids, "_generator", None)
    monkeypatch.setenv("NOETL_STREAM_NODE_ID", raw)
    with pytest.raises(InfrastructureError, match="NOETL_STREAM_NODE_ID"):
        new_execution_id()


def test_child_ids_are_deterministic_numeric_and_one_per_attempt() -> None:
    key = "123.start.1:None:start_task:1"
    child = ids.child_execution_id("123", key)
    assert child == ids.child_execution_id("123", key)
    assert is_int64_text(child)
    assert ids.child_execution_id("123", key[:-1] + "2") != child  # a retry is a new child
    assert ids.child_execution_id("124", key) != child


def test_derived_ids_of_different_purposes_differ_for_the_same_parts() -> None:
    assert ids.derived_execution_id("child", "a", "b") != ids.derived_execution_id(
        "idempotency-key", "a", "b")
    # Parts are kept apart: ("ab", "c") is not ("a", "bc").
    assert ids.derived_execution_id("x", "ab", "c") != ids.derived_execution_id("x", "a", "bc")
