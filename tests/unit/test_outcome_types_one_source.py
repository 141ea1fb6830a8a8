"""The outcome event types (what a worker publishes and the router consumes) are listed once,
in messages.py: the router's handlers, the listeners and the subjects read that list.
"""

from __future__ import annotations

import ast
from pathlib import Path

import noetl_stream
from noetl_stream import messages, router_events, subjects
from noetl_stream.router import listeners

ROOT = Path(noetl_stream.__file__).parent


def _literal_lists(tree: ast.AST) -> list[set[str]]:
    """The string members of every literal tuple, list and set in a module."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            found.append({e.value for e in node.elts
                          if isinstance(e, ast.Constant) and isinstance(e.value, str)})
    return found


def test_only_messages_lists_the_outcome_types() -> None:
    outcomes = set(messages.OUTCOME_EVENTS)
    listing = sorted(str(p.relative_to(ROOT)) for p in ROOT.rglob("*.py")
                     if any(outcomes <= members
                            for members in _literal_lists(ast.parse(p.read_text()))))
    assert listing == ["messages.py"]


def test_every_reader_reads_that_list() -> None:
    outcomes = set(messages.OUTCOME_EVENTS)
    assert set(subjects.ROUTER_INPUT_EVENTS) == outcomes
    assert set(listeners.OUTCOMES) == outcomes
    # The router takes an outcome by its model, which decoding gives exactly these types.
    assert {etype for etype, tag in router_events._MODEL_OF_TYPE.items()
            if tag == "outcome"} == outcomes
