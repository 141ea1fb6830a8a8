"""libyaml's event parser feeding ruamel's composer and constructor.

ruamel's pure-Python scanner and parser are about nine tenths of the time a playbook takes to
read (a 300-step playbook: half a second and more). libyaml (PyYAML's C extension) scans and
parses the same text some thirty times faster. Its events are handed, converted, to ruamel's
own composer and round-trip constructor, so the document is what ruamel alone builds: the same
types, YAML 1.2 scalars, line numbers, anchors, merge keys and duplicate-key errors.

Only the common case takes this path. A `%YAML`/`%TAG` directive, an explicit tag, or any
error at all (of libyaml or of the constructor) makes the caller read the text again with
ruamel alone, so what a document that fails says, and every rule only ruamel knows, is
unchanged.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any

from ruamel.yaml import events as rt


def _libyaml() -> tuple[Any, Any]:
    """PyYAML's C parser and its error class, or (None, None) without the C extension (then
    every document is read by ruamel alone).
    """
    try:
        pyyaml = importlib.import_module("yaml")
        return importlib.import_module("yaml._yaml").CParser, pyyaml.YAMLError
    except ImportError:  # pragma: no cover - PyYAML's wheels ship libyaml where we run
        return None, None


_CParser, _YAMLError = _libyaml()


class NotOnFastPath(Exception):
    """The text uses something only ruamel's own parser handles: read it with ruamel."""


AVAILABLE = _CParser is not None


def _convert(event: Any) -> Any:
    """One PyYAML event as the ruamel event its parser would have produced (no comments)."""
    kind = type(event).__name__
    start, end = event.start_mark, event.end_mark
    if kind == "ScalarEvent":
        if event.tag is not None and event.tag != "!":
            raise NotOnFastPath("an explicit tag")
        return rt.ScalarEvent(event.anchor, None, event.implicit, event.value, start, end,
                              style=event.style)
    if kind in ("MappingStartEvent", "SequenceStartEvent"):
        if event.tag is not None and event.tag != "!":
            raise NotOnFastPath("an explicit tag")
        cls = rt.MappingStartEvent if kind == "MappingStartEvent" else rt.SequenceStartEvent
        return cls(event.anchor, None, event.implicit, start, end, flow_style=event.flow_style)
    if kind == "AliasEvent":
        return rt.AliasEvent(event.anchor, start, end)
    if kind == "DocumentStartEvent":
        if event.version is not None or event.tags:
            raise NotOnFastPath("a YAML directive")
        return rt.DocumentStartEvent(start, end, explicit=event.explicit)
    if kind == "DocumentEndEvent":
        return rt.DocumentEndEvent(start, end, explicit=event.explicit)
    simple = {"StreamStartEvent": rt.StreamStartEvent, "StreamEndEvent": rt.StreamEndEvent,
              "MappingEndEvent": rt.MappingEndEvent, "SequenceEndEvent": rt.SequenceEndEvent}
    return simple[kind](start, end)


class EventFeed:
    """What ruamel's composer asks of its parser (check, peek, get, dispose), from libyaml."""

    def __init__(self, text: str) -> None:
        if _CParser is None:
            raise NotOnFastPath("libyaml is not installed")
        self._source: Iterator[Any] = self._events(text)
        self._next: Any = None

    @staticmethod
    def _events(text: str) -> Iterator[Any]:
        parser = _CParser(text)
        try:
            while parser.check_event():
                yield _convert(parser.get_event())
        except _YAMLError as exc:
            raise NotOnFastPath(str(exc)) from None
        finally:
            parser.dispose()

    def peek_event(self) -> Any:
        if self._next is None:
            self._next = next(self._source, None)
        return self._next

    def check_event(self, *choices: Any) -> bool:
        event = self.peek_event()
        if event is None:
            return False
        return not choices or isinstance(event, choices)

    def get_event(self) -> Any:
        event = self.peek_event()
        self._next = None
        return event

    def dispose(self) -> None:
        self._source = iter(())
