"""`env` keychain entries on the worker: the variables they name, and a spec of no known form."""

from __future__ import annotations

import pytest

from noetl_stream.errors import KeychainError
from noetl_stream.jsonutil import JsonValue
from noetl_stream.worker.keychain import _from_env


def test_a_variable_name_gives_its_value_and_a_mapping_one_field_per_variable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KC_TEST_USER", "ann")
    monkeypatch.setenv("KC_TEST_PASS", "pw")
    assert _from_env("api", "KC_TEST_USER") == {"value": "ann"}
    assert _from_env("api", {"user": "KC_TEST_USER", "password": "KC_TEST_PASS"}) == \
        {"user": "ann", "password": "pw"}


@pytest.mark.parametrize("spec", [7, ["KC_TEST_USER"], None])
def test_a_spec_that_is_neither_a_name_nor_a_mapping_names_the_entry(spec: JsonValue) -> None:
    with pytest.raises(KeychainError, match=r'api.*needs "env": a variable name'):
        _from_env("api", spec)
