"""A playbook's document built straight from libyaml's events.

ruamel's pure-Python scanner and parser are about nine tenths of the time a playbook takes to
read (a 300-step playbook: half a second and more on a loaded machine). libyaml (PyYAML's C
extension) scans and parses the same text some thirty times faster; this builds from its events
the document ruamel's round-trip loader builds: CommentedMap and CommentedSeq (FastMap and
FastSeq, whose look-ups and iteration skip what only merge keys and comments need) with the line
and column of every key, value and item, plain scalars resolved by ruamel's YAML 1.2 resolver and
anything but a string or null made by ruamel's own constructor. It also counts the values it
builds, which is what the document expands to (`Read`).

Only the common case is built here. Anchors and aliases (and so merge keys), explicit tags, a
`%YAML`/`%TAG` directive, a second document, a duplicate or non-scalar key, nesting deeper than
MAX_DEPTH, or any libyaml error raise NotOnFastPath: the caller reads the text again with
ruamel alone, so what a failing document says, and every rule only ruamel knows, is unchanged.
"""

from __future__ import annotations

import importlib
from typing import Any, NamedTuple

from ruamel.yaml.comments import CommentedMap, CommentedSeq, Format, LineCol
from ruamel.yaml.nodes import ScalarNode
from ruamel.yaml.representer import RoundTripRepresenter
from ruamel.yaml.resolver import VersionedResolver
from ruamel.yaml.scalarstring import FoldedScalarString, LiteralScalarString

from noetl_stream.jsonutil import JsonValue

MAX_DEPTH = 100  # deeper documents go to ruamel, which bounds them (dsl/source.py)
_STR = "tag:yaml.org,2002:str"
_NULL = "tag:yaml.org,2002:null"
_MERGE = "tag:yaml.org,2002:merge"
_LINE_COL: str = LineCol.attrib
_FORMAT: str = Format.attrib


class NotOnFastPath(Exception):
    """The text uses something only ruamel's own reading handles: read it with ruamel."""


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
AVAILABLE = _CParser is not None


class _Nothing:
    """The root of a document with no content yet."""


_NOTHING = _Nothing()
_NO_KEY = object()


def build(text: str, constructor: Any) -> JsonValue:
    """The document of `text` as ruamel's round-trip loader builds it; `constructor` (a
    round-trip constructor) makes the scalars that are neither strings nor null.
    """
    return read(text, constructor).document


class Read(NamedTuple):
    """A document read on the fast path, with how many values it holds (each mapping value,
    sequence item and collection, the root included; keys aside): without aliases that is what
    it expands to, and its nesting is at most MAX_DEPTH, so a reader bounding either need not
    walk it again.
    """

    document: JsonValue
    values: int


def read(text: str, constructor: Any) -> Read:
    """`build`, with the count of values the document holds."""
    if _CParser is None:
        raise NotOnFastPath("libyaml is not installed")
    reader = _Reader(constructor)
    parser = _CParser(text)
    try:
        while parser.check_event():
            reader.take(parser.get_event())
    except _YAMLError as exc:
        raise NotOnFastPath(str(exc)) from None
    finally:
        parser.dispose()
    return Read(None if isinstance(reader.root, _Nothing) else reader.root, reader.values)


class FastMap(CommentedMap):
    """A mapping built here. It has no merge keys (a document with one is left to ruamel), so
    looking a key up needs none of CommentedMap's search of merged mappings, nor its exception
    for a missing key: the parser looks up a few dozen keys a step, most of them absent.
    """

    __slots__ = ()

    __getitem__ = dict.__getitem__

    def get(self, key: object, default: object = None) -> object:
        try:
            return dict.get(self, key, default)
        except TypeError:  # an unhashable key, which CommentedMap.get answers with the default
            return default


class FastSeq(CommentedSeq):
    """A sequence built here: iterated as the list it is, not through the abstract sequence's
    index-by-index `__iter__` that CommentedSeq inherits.
    """

    __slots__ = ()

    __iter__ = list.__iter__


# Written back as ruamel writes its own (ruamel picks a representer by the exact type).
RoundTripRepresenter.add_representer(FastMap, RoundTripRepresenter.represent_dict)
RoundTripRepresenter.add_representer(FastSeq, RoundTripRepresenter.represent_list)


class _Reader:
    """Events in, the document out; `open` holds each unfinished collection as [container,
    its pending key (or _NO_KEY), that key's mark, its line/column record (ruamel's `lc`),
    whether it is a sequence].
    """

    def __init__(self, constructor: Any) -> None:
        self.constructor = constructor
        self.resolver = VersionedResolver()
        # plain scalar -> its tag's name and its tag: keys and kinds repeat a lot
        self.tags: dict[str, tuple[str, object]] = {}
        self.open: list[list[Any]] = []
        self.root: JsonValue | _Nothing = _NOTHING
        self.documents = 0
        self.values = 0

    def take(self, event: Any) -> None:
        kind = type(event).__name__
        if kind == "ScalarEvent":
            self.add(self.scalar(event), event.start_mark)
        elif kind == "MappingStartEvent":
            self.start(event, FastMap(), False)
        elif kind == "SequenceStartEvent":
            self.start(event, FastSeq(), True)
        elif kind in ("MappingEndEvent", "SequenceEndEvent"):
            self.open.pop()
        elif kind == "AliasEvent":
            raise NotOnFastPath("an alias")
        elif kind == "DocumentStartEvent":
            self.documents += 1
            if self.documents > 1 or event.version is not None or event.tags:
                raise NotOnFastPath("a directive or a second document")

    def start(self, event: Any, node: Any, sequence: bool) -> None:
        _plain_node(event)
        mark = event.start_mark
        # The records ruamel's `lc` and `fa` would make on first use, made here at once.
        lc = LineCol()
        lc.line, lc.col = mark.line, mark.column
        setattr(node, _LINE_COL, lc)
        style = Format()
        if event.flow_style:
            style.set_flow_style()
        else:
            style.set_block_style()
        setattr(node, _FORMAT, style)
        self.add(node, mark)
        self.open.append([node, _NO_KEY, None, lc, sequence])
        if len(self.open) > MAX_DEPTH:
            raise NotOnFastPath("deep nesting")

    def scalar(self, event: Any) -> Any:
        _plain_node(event)
        if not event.implicit[0]:  # quoted, or a block: a string, as ruamel resolves it
            name, tag = _STR, None
        else:
            known = self.tags.get(event.value)
            if known is None:
                resolved = self.resolver.resolve(ScalarNode, event.value, event.implicit)
                known = self.tags[event.value] = (str(resolved), resolved)
            name, tag = known
        if name == _STR:
            if event.style == "|":
                return LiteralScalarString(event.value)
            if event.style == ">":
                return FoldedScalarString(event.value)
            return event.value
        if name == _NULL:
            return None
        if name == _MERGE:
            raise NotOnFastPath("a merge key")
        node = ScalarNode(tag, event.value, event.start_mark, event.end_mark, style=event.style)
        return self.constructor.construct_object(node, deep=True)

    def add(self, value: Any, mark: Any) -> None:
        """`value` into the innermost open collection (as the key, or the value of its key)."""
        if not self.open:
            self.root = value
            self.values += 1
            return
        top = self.open[-1]
        container, key, key_mark, lc, sequence = top
        if sequence:
            lc.add_idx_line_col(len(container), [mark.line, mark.column])
            list.append(container, value)  # it holds no comments to move, as `append` would
            self.values += 1
        elif key is _NO_KEY:
            if isinstance(value, (CommentedMap, CommentedSeq)):
                raise NotOnFastPath("a collection as a key")
            if value in container:
                raise NotOnFastPath("a duplicate key")  # ruamel says which, and where
            top[1], top[2] = value, mark
        else:
            lc.add_kv_line_col(key, [key_mark.line, key_mark.column, mark.line, mark.column])
            container[key] = value
            top[1] = _NO_KEY
            self.values += 1


def _plain_node(event: Any) -> None:
    if event.anchor is not None:
        raise NotOnFastPath("an anchor")
    if event.tag is not None and event.tag != "!":
        raise NotOnFastPath("an explicit tag")
