"""The template filters NoETL's engines register, as they behave there (dsl/filters.py)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from noetl_stream.dsl.parser import parse_playbook
from noetl_stream.dsl.templating import render_string
from noetl_stream.errors import TemplateError

CONTEXT: dict[str, Any] = {
    "fetch": {"rows": [1, 2, 3], "status": "ok"},
    "wrapped": {"result": {"rows": [9]}, "rows": [0]},
    "encoded": "aGVsbG8gd29ybGQ=",
    "doc": '{"a": [1, 2]}',
    "nothing": None,
    "text": "héllo",
}


@pytest.mark.parametrize(("text", "value"), [
    ("{{ 'user:pass' | b64encode }}", "dXNlcjpwYXNz"),
    ("{{ encoded | b64decode }}", "hello world"),
    ("{{ 42 | b64encode | b64decode }}", 42),  # the text "42", read as a number
    ("{{ fetch.rows | len }}", 3),
    ("{{ text | len }}", 5),
    ("{{ fetch | len }}", 2),
    ("{{ 7 | len }}", 0),
    ("{{ missing | length }}", 0),
    ("{{ fetch.rows | select('odd') | length }}", 2),
    ("{{ fetch.rows | map('string') | len }}", 3),
    ("{{ doc | fromjson }}", {"a": [1, 2]}),
    ("{{ 'not json' | fromjson }}", None),
    ("{{ (doc | fromjson).a | last }}", 2),
    ("{{ missing | tojson }}", None),  # the text "null", read as null
    ("{{ fetch.rows | tojson }}", [1, 2, 3]),
    ("{{ fetch.rows | tojson | length }}", 7),
    ("{{ missing | d('x') }}", "x"),
    ("{{ nothing | d('x') }}", "x"),
    ("{{ nothing | default('x') }}", "x"),
    ("{{ '' | default('x') }}", ""),
    ("{{ '' | default('x', true) }}", "x"),
    ("{{ '12' | int + 1 }}", 13),
    ("{{ '3.9' | int }}", 3),
    ("{{ 'abc' | int }}", 0),
    ("{{ nothing | int }}", 0),
    ("{{ missing | int }}", 0),
    ("{{ 'abc' | float }}", 0.0),
    ("{{ missing | float }}", 0.0),
    ("{{ '2.5' | float }}", 2.5),
    ("{{ fetch | keys }}", ["rows", "status"]),
    ("{{ fetch | values | last }}", "ok"),
    ("{{ fetch | get('status') }}", "ok"),
    ("{{ fetch | get('nope', 'd') }}", "d"),
    ("{{ 'a,b,c' | split(',') }}", ["a", "b", "c"]),
    ("{{ 'a b  c' | split }}", ["a", "b", "c"]),
    ("{{ 'x\ny' | lines }}", ["x", "y"]),
    ("{{ fetch.rows | bool }}", True),
    ("{{ missing | bool }}", False),
    ("{{ 'prefix-x' is startingwith('prefix') }}", True),
    ("{{ 'x.yaml' is endingwith('.yml') }}", False),
    ("{{ fetch.rows is containing(2) }}", True),
])
def test_noetl_filters_render_as_noetl_renders_them(text: str, value: Any) -> None:
    assert render_string(text, CONTEXT) == value


def test_result_reads_the_step_itself_when_it_has_no_result_key() -> None:
    assert render_string("{{ fetch.result.rows }}", CONTEXT) == [1, 2, 3]
    assert render_string("{{ fetch['result']['status'] }}", CONTEXT) == "ok"
    assert render_string("{{ fetch.result.result.status }}", CONTEXT) == "ok"
    # A real `result` key wins over the fall-through.
    assert render_string("{{ wrapped.result.rows }}", CONTEXT) == [9]


def test_b64decode_of_what_is_not_base64_is_an_error_naming_the_filter() -> None:
    with pytest.raises(TemplateError, match="b64decode: the value is not base64"):
        render_string("{{ 'a%b' | b64decode }}", CONTEXT, step="s", field="f")
    with pytest.raises(TemplateError, match="not UTF-8"):
        render_string("{{ '/w==' | b64decode }}", CONTEXT)


def test_a_misspelt_path_is_missing_to_the_lenient_filters_and_logged(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="noetl_stream.dsl.templating")
    assert render_string("{{ fecth.rows | int }}", CONTEXT, step="s", field="n") == 0
    assert render_string("{{ fecth.rows | len }}", CONTEXT, step="s", field="m") == 0
    assert ["`fecth` is undefined; did you mean `fetch`?" in r.getMessage()
            for r in caplog.records] == [True, True]


def test_encrypt_secret_is_refused_with_what_to_write_instead() -> None:
    with pytest.raises(TemplateError, match=r"encrypt_secret .* credential store"):
        render_string("{{ fetch | encrypt_secret }}", CONTEXT)


def test_validate_accepts_every_noetl_filter(tmp_path: Path) -> None:
    playbook = tmp_path / "filters.yaml"
    playbook.write_text("""\
apiVersion: noetl.io/v2
kind: Playbook
metadata: {name: filters, path: t/filters}
workload: {user: u, password: p}
workflow:
  - step: start
    tool:
      kind: python
      code: |
        result = {"n": 1}
    next:
      - step: use
  - step: use
    tool:
      kind: noop
      args:
        basic: "{{ (workload.user ~ ':' ~ workload.password) | b64encode }}"
        plain: "{{ 'dQ==' | b64decode }}"
        count: "{{ start.result.n | int + (workload | len) }}"
        parsed: "{{ '[1]' | fromjson | d([]) | tojson }}"
        names: "{{ workload | keys }}"
    next:
      - step: end
  - step: end
""")
    parsed = parse_playbook(playbook.read_text(), str(playbook))  # raises PlaybookError
    assert [step.name for step in parsed.playbook.steps] == ["start", "use", "end"]
