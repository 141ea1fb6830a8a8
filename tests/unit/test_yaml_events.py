"""The libyaml fast path reads every document exactly as ruamel alone does (dsl/yaml_events.py).

Each case is read both ways; values, their types and every line/column ruamel records must be
equal, and a document the fast path leaves must still be read (by ruamel).
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml.comments import CommentedMap, CommentedSeq

from noetl_stream.dsl import source, yaml_events
from noetl_stream.dsl.source import _NOT_READ, _load_fast, _Yaml, load_yaml
from noetl_stream.errors import YamlSyntaxError

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(not yaml_events.AVAILABLE, reason="PyYAML's libyaml is absent")


def _shape(value: Any, path: str = "$") -> list[Any]:
    """Every value with its type, and every position ruamel keeps, in document order."""
    out: list[Any] = []
    if isinstance(value, CommentedMap):
        out.append((path, value.lc.line, value.lc.col))
        for key in value:
            out.append((path, repr(key), type(key).__name__, (value.lc.data or {}).get(key)))
            out += _shape(value[key], f"{path}.{key}")
    elif isinstance(value, CommentedSeq):
        out.append((path, value.lc.line, value.lc.col))
        for i, item in enumerate(value):
            out.append((path, i, (value.lc.data or {}).get(i)))
            out += _shape(item, f"{path}[{i}]")
    else:
        out.append((path, type(value).__name__, repr(value)))
    return out


CASES = {
    "yaml 1.2 scalars": "a: yes\nb: on\nc: 010\nd: 0o10\ne: 0x1F\nf: 1_000\ng: .5\nh: -.5\n"
                        "i: 1e3\nj: .inf\nk: ~\nl: null\nm: True\nn: 2026-01-02\n"
                        "o: 2026-01-02T03:04:05Z\np: 1:20\nq: ''\nr: -0\n",
    "quoting and blocks": "a: 'it''s'\nb: \"tab\\tnew\\nline \\u00e9 \\/\"\nc: |\n  one\n  two\n"
                          "d: >-\n  folded\n  text\ne: \"{{ workload.x }}\"\nf: plain text # note\n",
    "flow and nesting": "steps: [{step: a, next: {arcs: [{step: b}]}}, {step: b}]\n"
                        "empty_map: {}\nempty_list: []\nnested:\n  - - 1\n    - 2\n  - x: [y, z]\n",
    "non-string keys": "1: one\nfalse: f\n~: n\n2.5: f\n",
    "unicode": "name: café ✓\nlist:\n- ü\n- 中文\n",
    "comments everywhere": "# head\na: 1  # one\n# between\nb:\n  - 2  # two\n  # inner\n"
                           "  - 3\n# tail\n",
    "explicit document": "---\na: 1\n...\n",
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_fast_path_reads_each_form_as_ruamel_does(name: str) -> None:
    text = CASES[name]
    fast = _load_fast(text)
    assert fast is not _NOT_READ, "a common form fell off the fast path"
    ruamel = _Yaml(typ="rt").load(text)
    assert fast == ruamel
    assert _shape(fast) == _shape(ruamel)


@pytest.mark.parametrize("text", [
    "base: &b {kind: http, timeout: 3}\nuse:\n  <<: *b\n  url: u\nagain: *b\n",  # aliases
    "%YAML 1.1\n---\na: yes\n",  # a directive changes how scalars resolve
    "a: !custom x\n",  # an explicit tag
    "a: 1\na: 2\n",  # ruamel refuses duplicate keys
    "a: [1, 2\n",  # a syntax error
    "a: 1\n---\nb: 2\n",  # two documents
])
def test_what_the_fast_path_leaves_is_read_by_ruamel_alone(text: str) -> None:
    assert _load_fast(text) is _NOT_READ
    try:
        expected: Any = _Yaml(typ="rt").load(text)
    except Exception as exc:
        with pytest.raises(YamlSyntaxError):
            load_yaml(text)
        assert type(exc).__name__
        return
    assert _shape(load_yaml(text)) == _shape(expected)


def test_the_repository_playbooks_read_the_same_both_ways() -> None:
    files = sorted((REPO / "playbooks").rglob("*.yaml")) + sorted((REPO / "tests").rglob("*.yaml"))
    assert files
    for path in files:
        text = path.read_text()
        try:
            ruamel = _Yaml(typ="rt").load(text)
        except Exception:  # a deliberately broken fixture: the fast path leaves it
            assert _load_fast(text) is _NOT_READ, path
            continue
        fast = _load_fast(text)
        if fast is _NOT_READ:  # only anchors (and tags) send a valid playbook to ruamel alone
            assert "&" in text or "!" in text, path
            continue
        assert _shape(fast) == _shape(ruamel), path


def _values(value: Any) -> int:
    """What `_check_bounds` counts: each collection and each value in one, keys aside."""
    if isinstance(value, dict):
        return 1 + sum(_values(v) for v in value.values())
    if isinstance(value, list):
        return 1 + sum(_values(v) for v in value)
    return 1


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_fast_path_counts_every_value_it_builds(name: str) -> None:
    read = yaml_events.read(CASES[name], _Yaml(typ="rt").constructor)

    assert read.values == _values(read.document)


def test_a_document_on_the_fast_path_is_not_walked_again(monkeypatch: pytest.MonkeyPatch) -> None:
    # Its nesting and size are known from the build: bounding it walks nothing more.
    walks: list[object] = []
    monkeypatch.setattr(source, "_check_bounds", walks.append)
    text = (REPO / "playbooks" / "examples" / "hello.yaml").read_text()

    assert load_yaml(text) == _Yaml(typ="rt").load(text)
    assert walks == []
    assert yaml_events.MAX_DEPTH <= source.MAX_NESTING


def test_a_document_past_the_value_bound_is_still_refused_where_it_was(
        monkeypatch: pytest.MonkeyPatch) -> None:
    text = "a: 1\nb:\n  - x\n  - y\n  - {c: 2, d: [3, 4, 5]}\n"  # 11 values, no aliases
    monkeypatch.setattr(source, "MAX_VALUES", 10)

    with pytest.raises(YamlSyntaxError) as fast:
        load_yaml(text)
    with pytest.raises(YamlSyntaxError) as walked:
        source._check_bounds(_Yaml(typ="rt").load(text))
    assert "expands to more than 10 values" in str(fast.value)
    assert (str(fast.value), fast.value.line) == (str(walked.value), walked.value.line)


def test_a_built_mapping_and_sequence_answer_as_ruamel_s_own() -> None:
    text = "a: 1\nb: [x, {c: 2}]\nd:\n  - 1\n  - e: |\n      lit\n"
    fast, ruamel = load_yaml(text), _Yaml(typ="rt").load(text)
    assert isinstance(fast, CommentedMap) and isinstance(ruamel, CommentedMap)

    for key in ("a", "b", "missing", ["unhashable"]):
        assert fast.get(key) == ruamel.get(key)
        assert fast.get(key, "dflt") == ruamel.get(key, "dflt")
    with pytest.raises(KeyError):
        fast["missing"]
    assert list(fast["b"]) == list(ruamel["b"])
    assert fast["b"][0:1] == ruamel["b"][0:1]
    written, expected = io.StringIO(), io.StringIO()
    _Yaml(typ="rt").dump(fast, written)
    _Yaml(typ="rt").dump(ruamel, expected)
    assert written.getvalue() == expected.getvalue()
