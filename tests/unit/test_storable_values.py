"""jsonutil.storable_problem: a step's result or ctx patch that cannot travel in an event is
named, and the values with nothing to encode (no result, an empty patch) are passed without
encoding them."""

from __future__ import annotations

import pytest

from noetl_stream.jsonutil import storable_problem


def nested(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("value", [None, True, 1.5, float("nan"), {}, [], "text", 2**63 - 1,
                                   -(2**63), {"a": [1, {"b": None}]}, nested(200)])
def test_values_that_travel(value: object) -> None:
    assert storable_problem(value) is None


@pytest.mark.parametrize(("value", "says"), [
    (2**64, "64 bits"), (-(2**63) - 1, "64 bits"), ({"n": 2**70}, "64 bits"),
    (nested(201), "nested more than 200 levels"), ([nested(200)], "nested more than 200"),
    ("\ud800", "cannot be encoded as JSON"), ({"k": "\udfff"}, "cannot be encoded as JSON"),
])
def test_values_that_do_not_travel_are_named(value: object, says: str) -> None:
    problem = storable_problem(value)
    assert problem is not None and says in problem
