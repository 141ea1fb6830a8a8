"""The filters and tests NoETL's minijinja engines have beyond Jinja's: each renders as there."""

from __future__ import annotations

import pytest

from noetl_stream.dsl.templating import render_string
from noetl_stream.errors import TemplateError

CONTEXT = {"row": {"id": 7, "tags": "a,b,c", "note": "one\ntwo"}, "rows": [10, 20],
           "path": "s3://bucket/key.csv", "empty": ""}


def test_split_with_a_separator_and_on_whitespace() -> None:
    assert render_string("{{ row.tags | split(',') }}", CONTEXT) == ["a", "b", "c"]
    assert render_string("{{ 'x  y z' | split }}", CONTEXT) == ["x", "y", "z"]
    assert render_string("{{ row.tags | split(',', 1) }}", CONTEXT) == ["a", "b,c"]
    assert render_string("{{ (row.tags | split(','))[1] }}", CONTEXT) == "b"


def test_keys_and_values_of_a_mapping_keep_its_order() -> None:
    assert render_string("{{ row | keys }}", CONTEXT) == ["id", "tags", "note"]
    assert render_string("{{ row | values | first }}", CONTEXT) == 7


def test_keys_of_a_list_is_a_template_error() -> None:
    with pytest.raises(TemplateError, match="keys needs a mapping"):
        render_string("{{ rows | keys }}", CONTEXT)


def test_get_reads_a_key_or_an_index_and_a_missing_one_is_null_or_the_default() -> None:
    assert render_string("{{ row | get('id') }}", CONTEXT) == 7
    assert render_string("{{ rows | get(1) }}", CONTEXT) == 20
    assert render_string("{{ row | get('missing') }}", CONTEXT) is None
    assert render_string("{{ row | get('missing', 'n/a') }}", CONTEXT) == "n/a"
    assert render_string("{{ rows | get(5) is none }}", CONTEXT) is True


def test_lines_and_bool() -> None:
    assert render_string("{{ row.note | lines }}", CONTEXT) == ["one", "two"]
    assert render_string("{{ empty | bool }}", CONTEXT) is False
    assert render_string("{{ row.id | bool }}", CONTEXT) is True


def test_startingwith_and_endingwith_tests() -> None:
    assert render_string("{{ path is startingwith 's3://' }}", CONTEXT) is True
    assert render_string("{{ path is endingwith '.json' }}", CONTEXT) is False
    assert render_string("{{ row.id is startingwith '7' }}", CONTEXT) is False


def test_minijinja_globals_and_tests_that_jinja_shares_render_alike() -> None:
    assert render_string("{{ range(3) | list }}", CONTEXT) == [0, 1, 2]
    assert render_string("{{ dict(a=1) }}", CONTEXT) == {"a": 1}
    assert render_string("{% set ns = namespace(n=0) %}{% for x in rows %}{% set ns.n = ns.n + x %}"
                         "{% endfor %}{{ ns.n }}", CONTEXT) == 30
    assert render_string("{{ [4 is even, 3 is odd, 9 is divisibleby(3), rows is iterable,"
                         " 1 is in(rows), row.id is integer, 1.5 is float, true is boolean] }}",
                         CONTEXT) == [True, True, True, True, False, True, True, True]


def test_the_filters_noetls_engines_register_that_jinja_has_too_render_alike() -> None:
    assert render_string("{{ row | items | list }}", CONTEXT) == [("id", 7), ("tags", "a,b,c"),
                                                                  ("note", "one\ntwo")]
    assert render_string("{{ [row.id | string, ' A b ' | trim | upper, 'Ab' | lower,"
                         " 'a-b' | replace('-', '+'), rows | join(','), rows | first,"
                         " rows | last, row.tags | length, row | tojson | fromjson | length] }}",
                         CONTEXT) == ["7", "A B", "ab", "a+b", "10,20", 10, 20, 5, 3]
