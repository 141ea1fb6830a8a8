"""The work one render may do, counted in operations so the count is the same on every replay.

A render of the router's templates runs in the server process; a clock-based limit would make
routing depend on the machine's load, so the limit is a count instead. One operation is: a
loop iteration or range item, an item handed to a filter, test or call (its arguments' lengths,
plus one for the call; a method's object too), the length of what a filter returns and one per
item of a stream it yields, and an attribute or item read (what a `groupby`, `sort` or `map`
does per row goes through the environment's reads). Text counts by the thousand characters,
which C code handles for the price of one Python-level operation. What compares values (`==`,
`in`, `<`, `sort`, `unique`, `min`, `max`, comparing tests) spends its operands' sizes all the
way down (a list of 10 lists of 10 counts 110; measured once per value and render); `~` and
`+` spend their operands' lengths. Everything a
template does that can take time is one of these or bounded elsewhere (`*`, `**`, output size).

`metered(render)` runs `render` under one budget of MAX_OPERATIONS; a render already inside one
(the templates of one `set:` rendered together) shares it. Past the budget a render raises
TemplateBound, which the renderer turns into a template error naming step and field.
"""

from __future__ import annotations

import contextvars
import functools
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar

from jinja2 import Undefined

MAX_OPERATIONS = 1_000_000  # of one render, or of the templates rendered together
MAX_RANGE = 100_000  # items of one range()
PAUSE_EVERY = 2_000  # operations between two pauses of a render (when a pause is set)
CHARS_PER_OPERATION = 1_000  # characters of text handed to a filter or call per operation

T = TypeVar("T")


class _Budget:
    """What is left to the render in progress, when it pauses next, and the sizes it measured
    (by object identity; the objects are kept so that no identity is reused meanwhile).
    """

    __slots__ = ("here", "left", "pause_at", "sizes")

    def __init__(self, here: _Allowance | None) -> None:
        self.left = MAX_OPERATIONS
        self.pause_at = MAX_OPERATIONS - PAUSE_EVERY
        self.sizes: dict[int, tuple[object, int]] = {}
        self.here = here


class _Allowance:
    """What the renders of one apply may still spend in the process that started them."""

    __slots__ = ("left",)

    def __init__(self, operations: int) -> None:
        self.left = operations


# None outside a render: only per-call bounds apply.
_BUDGET: contextvars.ContextVar[_Budget | None] = contextvars.ContextVar("template_budget",
                                                                         default=None)
_pause: Callable[[], None] | None = None
# None: a render may spend its whole budget where it runs.
_HERE: contextvars.ContextVar[_Allowance | None] = contextvars.ContextVar("render_here",
                                                                          default=None)


def pause_between_operations(pause: Callable[[], None] | None) -> None:
    """Set by a process whose renders run beside other work (the server applies events in a
    thread): `pause` runs every PAUSE_EVERY operations of a render, to hand the interpreter to
    threads waiting for it. It changes no result: the budget is the same count either way.
    """
    global _pause
    _pause = pause


_SIZED = (str, bytes, list, tuple, dict, set, frozenset, range)
_CONTAINERS = (list, tuple, dict, set, frozenset)


class TemplateBound(Exception):
    """A render went past one of the template bounds."""


class RenderElsewhere(BaseException):
    """The renders of one apply spent the allowance of `rendering_here`: the caller applies
    again, from the state it started from, where a long render holds up nobody else. It is a
    BaseException so that no `except Exception` on the way (the renderer turns those into
    template errors) takes it for the template's own failure.
    """


def rendering_here(operations: int, apply: Callable[[], T]) -> T:
    """`apply()`, whose renders together may spend `operations` before RenderElsewhere is raised.
    Where the work is done changes no result: the budget of each render is the same count.
    """
    token = _HERE.set(_Allowance(operations))
    try:
        return apply()
    finally:
        _HERE.reset(token)


def metered(render: Callable[[], T]) -> T:
    """`render()` under a budget of its own, or under the one already running."""
    if _BUDGET.get() is not None:
        return render()
    token = _BUDGET.set(_Budget(_HERE.get()))
    try:
        return render()
    finally:
        _BUDGET.reset(token)


def spend(operations: int) -> None:
    budget = _BUDGET.get()
    if budget is None:
        return
    budget.left -= operations
    here = budget.here
    if here is not None:
        here.left -= operations
        if here.left < 0:
            raise RenderElsewhere
    if budget.left < 0:
        raise TemplateBound(f"the template exceeded its budget of {MAX_OPERATIONS:,} operations "
                            "(loop iterations, items handed to filters and calls, reads); "
                            "templates are bounded so that one cannot stall the server")
    if _pause is not None and budget.left <= budget.pause_at:
        budget.pause_at = budget.left - PAUSE_EVERY
        _pause()


def _text_cost(length: int) -> int:
    """Characters are handled by C code a thousand at a time for one Python-level operation."""
    return length // CHARS_PER_OPERATION


def _shallow(value: object) -> int:
    if isinstance(value, (str, bytes)):
        return _text_cost(len(value))
    return len(value) if isinstance(value, (*_CONTAINERS, range)) else 0


def _size(value: object) -> int:
    """Items all the way down (text by the thousand characters): comparing, sorting or hashing a
    list of lists takes time in what the inner lists hold. Measured once per object and render;
    the walk stops past what the budget has left, so measuring costs no more than it allows.
    """
    # Undefined values are left alone: measuring one that stands for a broken read would raise
    # its error here instead of where the template uses it.
    if not isinstance(value, _CONTAINERS) or isinstance(value, Undefined):
        return _shallow(value) if not isinstance(value, Undefined) else 0
    budget = _BUDGET.get()
    if budget is None:
        return len(value)
    known = budget.sizes.get(id(value))
    if known is not None and known[0] is value:
        return known[1]
    size = _deep_size(value, budget.left + 1)
    budget.sizes[id(value)] = (value, size)
    return size


def _deep_size(value: object, limit: int) -> int:
    size, stack = 0, [value]
    while stack and size < limit:
        item = stack.pop()
        if isinstance(item, dict):
            size += len(item)
            stack.extend(item.values())
        elif isinstance(item, _CONTAINERS):
            size += len(item)
            stack.extend(item)
        elif isinstance(item, (str, bytes)):
            size += _text_cost(len(item))
    return size


def spend_call(args: Iterable[object], kwargs: Mapping[str, object]) -> None:
    """A filter or call spends one, plus the items (and kilo-characters) of what it is handed."""
    spend(1 + sum(map(_shallow, args)) + sum(map(_shallow, kwargs.values())))


def spend_deep(*values: object) -> None:
    """A comparison spends its operands' sizes all the way down (`a == b` walks both)."""
    spend(1 + sum(map(_size, values)))


def counted(iterable: Iterable[T]) -> Iterator[T]:
    for item in iterable:
        spend(1)
        yield item


# Filters and tests whose work does not grow with what they are handed: they spend one.
CONSTANT_FILTERS = frozenset({"length", "count", "first", "default", "d", "attr"})
CONSTANT_TESTS = frozenset({
    "defined", "undefined", "none", "boolean", "false", "true", "integer", "float", "number",
    "string", "mapping", "iterable", "sequence", "callable", "sameas", "escaped", "odd", "even",
    "divisibleby", "filter", "test", "lower", "upper",
})
# Filters that compare the items they are handed (sorting, deduplicating, extremes): their work
# grows with the items' own sizes. Tests not listed as constant compare their operands.
COMPARING_FILTERS = frozenset({"sort", "unique", "min", "max", "dictsort"})


def metered_filter(fn: Callable[..., object], name: str) -> Callable[..., object]:
    spend_for = _spend_one if name in CONSTANT_FILTERS else \
        _spend_deep_args if name in COMPARING_FILTERS else spend_call
    return _metered(fn, spend_for)


def metered_test(fn: Any, name: str) -> Callable[..., object]:
    return _metered(fn, _spend_one if name in CONSTANT_TESTS else _spend_deep_args)


def _spend_one(args: Iterable[object], kwargs: Mapping[str, object]) -> None:
    spend(1)


def _spend_deep_args(args: Iterable[object], kwargs: Mapping[str, object]) -> None:
    spend_deep(*args, *kwargs.values())


def _metered(fn: Callable[..., object],
             spend_for: Callable[[Iterable[object], Mapping[str, object]], None],
             ) -> Callable[..., object]:
    """`fn` spending what `spend_for` says it is handed, and one per item of a stream it
    yields. `functools.wraps` keeps Jinja's pass-context/environment marks.
    """

    @functools.wraps(fn)
    def call(*args: object, **kwargs: object) -> object:
        spend_for(args, kwargs)
        result = fn(*args, **kwargs)
        if isinstance(result, Iterator):
            return counted(result)
        spend(_shallow(result))  # what it made: a `replace` or `tojson` takes time in its length
        return result

    return call


def bounded_range(*args: int) -> range:
    items = range(*args)
    if len(items) > MAX_RANGE:
        raise TemplateBound(f"range() of {len(items)} items; at most {MAX_RANGE} are allowed")
    spend(len(items))
    return items


def bounded_iteration(iterable: Iterable[object]) -> Iterable[object]:
    """What a `{% for %}` walks: a sized collection spends its length at once (a loop left early
    spends it all; the budget is generous), a range was spent when it was made, anything else
    spends one per item.
    """
    if isinstance(iterable, range):
        return iterable
    if isinstance(iterable, (list, tuple, dict, str)):
        spend(len(iterable))
        return iterable
    return counted(iterable)
