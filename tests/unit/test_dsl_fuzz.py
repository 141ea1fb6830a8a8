"""The parser either accepts a playbook or raises PlaybookError with FILE:LINE issues: fuzzed
shapes, hostile YAML (deep nesting, alias bombs, non-UTF-8 bytes) never escape as another error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from noetl_stream.dsl import parse_playbook
from noetl_stream.dsl.parser import load_playbook
from noetl_stream.errors import PlaybookError

HEAD = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: f, path: f}\n"

BASE: dict[str, Any] = {
    "apiVersion": "noetl.io/v2", "kind": "Playbook", "metadata": {"name": "f", "path": "f"},
    "workload": {"n": 1},
    "keychain": [{"name": "k", "kind": "env", "env": {"a": "A"}}],
    "workflow": [
        {"step": "start", "pool": "default", "loop": {"in": "{{ [1, 2] }}", "iterator": "i"},
         "tool": {"kind": "python", "code": "result = 1", "set": {"ctx.a": 1},
                  "spec": {"policy": {"rules": [{"when": "{{ true }}",
                                                 "then": {"do": "continue", "set_ctx": {"b": 2}}}]}}},
         "set": {"ctx.c": "{{ 1 }}"},
         "next": {"spec": {"mode": "exclusive"},
                  "arcs": [{"step": "end", "when": "{{ true }}", "input": {"x": 1}}]}},
        {"step": "end", "tool": {"kind": "noop"}},
    ],
}

SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                    st.text(max_size=8), st.sampled_from(["{{", "{{ x }}", "{% for %}", "*", "a.b"]))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=8)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*prefix, i))
    return out


PATHS = _paths(BASE)[1:]


def _replaced(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    doc: Any = json.loads(json.dumps(BASE))
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return dict(doc)


def _accepts_or_rejects(text: str) -> None:
    try:
        parse_playbook(text, "fuzz.yaml")
    except PlaybookError as exc:
        assert exc.issues and all(str(i).startswith("fuzz.yaml") for i in exc.issues)


def test_the_unfuzzed_playbook_is_valid() -> None:
    parse_playbook(json.dumps(BASE), "fuzz.yaml")


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(PATHS), VALUES)
def test_any_value_in_any_field_is_accepted_or_a_playbook_error(path: tuple[Any, ...],
                                                                value: Any) -> None:
    _accepts_or_rejects(json.dumps(_replaced(path, value)))


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_any_text_is_accepted_or_a_playbook_error(text: str) -> None:
    _accepts_or_rejects(text)


def _error_line(text: str) -> str:
    with pytest.raises(PlaybookError) as caught:
        parse_playbook(text, "f.yaml")
    issue = caught.value.issues[0]
    assert issue.line is not None
    return str(issue)


@pytest.mark.parametrize(("body", "expected"), [
    ("workflow:\n  - step: start\n    tool: {kind: noop}\n    next:\n"
     "      arcs: [{step: end, input: \"x\"}]\n", "next.arcs[0].input"),
    ("keychain:\n  - {name: k, kind: [env]}\nworkflow:\n  - step: start\n    tool: {kind: noop}\n",
     "keychain[0].kind"),
    ("workflow:\n  - step: start\n    tool:\n      kind: noop\n      spec: {policy: {rules: "
     "[{when: '{{ true }}', then: {do: continue, set_ctx: 5}}]}}\n", "set_ctx"),
    ("workflow:\n  - step: start\n    tool: {kind: noop, set: \"x\"}\n", ".set"),
    ("workflow:\n  - step: start\n    pool: a.b\n    tool: {kind: noop}\n", "pool"),
    ("workload: " + "[" * 300 + "]" * 300 + "\nworkflow:\n  - step: start\n    tool: {kind: noop}\n",
     "nests more than"),
    ("workload: " + "[" * 150 + "]" * 150 + "\nworkflow:\n  - step: start\n    tool: {kind: noop}\n",
     "nests more than"),
])
def test_hostile_shapes_are_one_line_errors_with_a_line(body: str, expected: str) -> None:
    assert expected in _error_line(HEAD + body)


def test_an_alias_bomb_is_refused_without_expanding_it() -> None:
    lines = ["  a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"  a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    text = HEAD + "workload:\n" + "\n".join(lines) + "\nworkflow:\n  - step: s\n    tool: {kind: noop}\n"

    assert "expands to more than" in _error_line(text)


def test_a_file_that_is_not_utf8_is_an_error_at_its_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_bytes(HEAD.encode() + b"workflow:\n  - step: s\n    desc: \"\xff\"\n")

    with pytest.raises(PlaybookError) as caught:
        load_playbook(path)
    assert str(caught.value.issues[0]).startswith(f"{path}:6: the file is not UTF-8")
