"""`--payload` and `--set` of run, restart and replay (cli/running.py's parse_payload)."""

from __future__ import annotations

import pytest

from noetl_stream.cli.common import EXIT_REJECTED
from noetl_stream.cli.running import parse_payload


def test_set_nests_by_dots_over_the_payload_and_reads_json_values() -> None:
    data = parse_payload('{"db": {"host": "a"}, "n": 1}',
                         ("db.port=5432", "db.host=b", "tags=[1, 2]", "name=plain words"))

    assert data == {"db": {"host": "b", "port": 5432}, "n": 1, "tags": [1, 2],
                    "name": "plain words"}


def test_set_under_a_key_that_holds_a_value_is_a_usage_error(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_payload(None, ("db=local", "db.port=5432"))

    assert exited.value.code == EXIT_REJECTED
    assert capsys.readouterr().err == ("noetl-stream: --set db.port: db is already set to a value "
                                       "that is not an object\n")


def test_set_under_a_nested_value_names_the_path_that_holds_it(
        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse_payload('{"a": {"b": [1]}}', ("a.b.c=1",))

    assert "--set a.b.c: a.b is already set" in capsys.readouterr().err
