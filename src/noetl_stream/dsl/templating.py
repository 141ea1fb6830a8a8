"""Sandboxed Jinja2 rendering with native single-expression values (ARCHITECTURE §8).

A string that is exactly one `{{ expr }}` renders to the expression's value (a list stays a list,
an int an int); any other string renders to text. Pure: the same template and context always give
the same value, so the router may use it. So there is no `random` filter and no `lipsum`, and
templates read their context without changing it (`ctx.update(...)`, `list.append(...)` are
refused: ImmutableSandboxedEnvironment).

Bounded: one render does at most MAX_OPERATIONS counted operations (loop iterations, items
handed to filters and calls, reads: dsl/template_budget.py), a `range()` has at most MAX_RANGE
items, text output and values made by `*` hold at most MAX_OUTPUT characters or items, and `**`
at most MAX_POWER_BITS bits. Past a bound the render fails with a template error naming step and
field. The bounds are counts, never time, so a render fails or succeeds alike on every replay.
"""

from __future__ import annotations

import difflib
import itertools
import logging
import math
import re
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from functools import lru_cache
from typing import Any, overload

from jinja2 import Template, TemplateSyntaxError, Undefined, nodes
from jinja2.environment import TemplateExpression
from jinja2.exceptions import TemplateError as JinjaTemplateError
from jinja2.exceptions import UndefinedError
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import missing

from noetl_stream import jsonutil
from noetl_stream.dsl.filters import FILTERS, TESTS
from noetl_stream.dsl.rendered_text import value_of_json_text, value_of_text
from noetl_stream.dsl.template_budget import (
    TemplateBound,
    bounded_iteration,
    bounded_range,
    metered,
    metered_filter,
    metered_test,
    spend,
    spend_call,
    spend_deep,
)
from noetl_stream.dsl.values import DataEnvelope, ListView
from noetl_stream.errors import TemplateError
from noetl_stream.jsonutil import JsonObject, JsonValue

MAX_OUTPUT = 4_000_000  # characters of a rendered text; items or characters a `*` may make
MAX_POWER_BITS = 4096  # bits of an integer `**` may make
OUTPUT_BATCH = 32  # text chunks rendered between two checks of the output's size


def _measured(value: object) -> object:
    """A comparison's operand, its size spent all the way down (the comparison walks it)."""
    spend_deep(value)
    return value


def _power_bits(base: object, exponent: object) -> float:
    if isinstance(base, bool) or isinstance(exponent, bool) or not isinstance(base, int) \
            or not isinstance(exponent, int) or exponent <= 0 or abs(base) < 2:
        return 0.0
    return exponent * math.log2(abs(base))


def _repeat_size(left: object, right: object) -> int:
    for seq, times in ((left, right), (right, left)):
        if isinstance(seq, (str, list, tuple)) and isinstance(times, int):
            return len(seq) * max(times, 0)
    return 0


def _through(attribute: str, node: nodes.Node) -> nodes.Call:
    return nodes.Call(nodes.EnvironmentAttribute(attribute), [node], [], None, None,
                      lineno=node.lineno)


class _Metering:
    """An AST rewrite before code generation, for what the sandbox offers no hook on: the
    iterable of every `{% for %}` goes through `bounded_iteration`, and every operand of a
    comparison (`in`, `==`, ...) and of `~` through `measured`, which spends its size all the
    way down (`x in rows`, `a == b`, `a ~ b` take time in proportion to it).
    """

    @staticmethod
    def rewrite(tree: nodes.Template) -> nodes.Template:
        for loop in tree.find_all(nodes.For):
            loop.iter = _through("bounded_iteration", loop.iter)
        for compare in tree.find_all(nodes.Compare):
            compare.expr = _through("measured", compare.expr)
            for operand in compare.ops:
                operand.expr = _through("measured", operand.expr)
        for concat in tree.find_all(nodes.Concat):
            concat.nodes = [_through("measured", node) for node in concat.nodes]
        return tree


SINGLE_EXPRESSION = re.compile(r"^\s*\{\{(?P<expr>.*)\}\}\s*$", re.DOTALL)
"""Text that starts with `{{` and ends with `}}` (space around allowed): one expression, maybe."""


class ReadOfUndefined(UndefinedError):
    """A template read a field of a value that is undefined. Carries what the message needs;
    `render_string` adds the did-you-mean, which needs the context.
    """

    def __init__(self, missing: Undefined, field: str) -> None:
        self.missing_name = str(missing._undefined_name or "")
        self.container = missing._undefined_obj
        self.field = field
        super().__init__(f"`{self.missing_name}` is undefined (reading `.{field}` of it)")


_READS: ContextVar[list[ReadOfUndefined] | None] = ContextVar("undefined_reads", default=None)


def _note(error: ReadOfUndefined) -> None:
    reads = _READS.get()
    if reads is not None:
        reads.append(error)


class _ChainedRead(Undefined):
    """The value of `a.b` when `a` is undefined: undefined again, as in NoETL's minijinja
    (`Chainable`). It prints empty, is false, iterates as nothing, compares equal only to an
    undefined value and is null as a template's value; `default(...)` and `is defined` see an
    undefined value. Each of those uses is noted so `render_string` can log the read (a misspelt
    name stays visible without failing the run); arithmetic and ordering raise, as they do on any
    undefined value.
    """

    __slots__ = ("_error",)

    def __init__(self, error: ReadOfUndefined) -> None:
        super().__init__(name=error.missing_name)
        self._error = error

    def _fail_with_undefined_error(self, *args: Any, **kwargs: Any) -> Any:
        raise self._error

    # Jinja's Undefined binds these to its own method; rebound so the error names the read.
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _fail_with_undefined_error
    __truediv__ = __rtruediv__ = __floordiv__ = __rfloordiv__ = _fail_with_undefined_error
    __mod__ = __rmod__ = __pos__ = __neg__ = __pow__ = __rpow__ = _fail_with_undefined_error
    __lt__ = __le__ = __gt__ = __ge__ = __int__ = __float__ = __call__ = _fail_with_undefined_error

    def used(self) -> None:
        _note(self._error)

    def __str__(self) -> str:
        self.used()
        return ""

    def __iter__(self) -> Iterator[Any]:
        self.used()
        return iter(())

    def __len__(self) -> int:
        self.used()
        return 0

    def __bool__(self) -> bool:
        self.used()
        return False

    def __contains__(self, item: object) -> bool:
        self.used()
        return False

    def __eq__(self, other: object) -> bool:
        self.used()
        return isinstance(other, Undefined)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return id(Undefined)

    def __getattr__(self, name: str) -> Any:
        if name[:2] == "__":
            raise AttributeError(name)
        return self

    def __getitem__(self, name: Any) -> Any:
        return self


def _read_of_undefined(obj: Undefined, field: str) -> Undefined:
    if isinstance(obj, _ChainedRead):
        return obj
    if obj._undefined_hint:  # the sandbox refused an unsafe attribute: say so, at once
        obj._fail_with_undefined_error()
    return _ChainedRead(ReadOfUndefined(obj, field))


# NoETL's engines read `x.result` of a mapping without a `result` key as the mapping itself, so
# `{{ step.result.rows }}` reads `step.rows` (its `StepResultProxy`); a real `result` key wins.
RESULT_KEY = "result"


class _Environment(ImmutableSandboxedEnvironment):
    """Playbook data is JSON: `x.items` must read the key "items", not the dict method.

    Undefined values read leniently (a missing name or key is `null`, as in NoETL's runtimes), and
    a field of an undefined value is a `_ChainedRead`, undefined too (docs/dialects.md
    "Templates").
    """

    def getattr(self, obj: Any, attribute: str) -> Any:
        spend(1)
        if isinstance(obj, Undefined):
            return _read_of_undefined(obj, attribute)
        if isinstance(obj, ListView) and obj.has_name(attribute):
            return obj.named(attribute)
        if isinstance(obj, DataEnvelope) and attribute == "data":
            return obj.envelope_data
        if isinstance(obj, Mapping):
            try:
                return obj[attribute]
            except (KeyError, TypeError):
                if attribute == RESULT_KEY:
                    return obj
        return super().getattr(obj, attribute)

    def getitem(self, obj: Any, argument: Any) -> Any:
        spend(1)
        if isinstance(obj, Undefined):
            return _read_of_undefined(obj, str(argument))
        if argument == RESULT_KEY and isinstance(obj, Mapping) and RESULT_KEY not in obj:
            return obj
        return super().getitem(obj, argument)

    # `*` and `**` are checked before they run: `'x' * 10**10` or `10**10**10` would otherwise
    # take the memory or the CPU of the process rendering it (intercepting also keeps Jinja
    # from folding them while it compiles); `+` spends the sizes it joins.
    intercepted_binops = frozenset({"*", "**", "+"})

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        spend_call((left, right), {})
        if operator == "**" and _power_bits(left, right) > MAX_POWER_BITS:
            raise TemplateBound(f"{left} ** {right} has more than {MAX_POWER_BITS} bits")
        if operator == "*" and _repeat_size(left, right) > MAX_OUTPUT:
            raise TemplateBound(f"repeating a value makes more than {MAX_OUTPUT} items")
        return super().call_binop(context, operator, left, right)

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:
        if __obj is not bounded_iteration and __obj is not _measured:  # they spend their own
            # A method spends the size of its object too (`text.upper()` walks `text`).
            spend_call((getattr(__obj, "__self__", None), *args), kwargs)
        return super().call(__context, __obj, *args, **kwargs)

    bounded_iteration = staticmethod(bounded_iteration)
    measured = staticmethod(_measured)

    def _generate(self, source: nodes.Template, name: str | None, filename: str | None,
                  defer_init: bool = False) -> str:
        return super()._generate(_Metering.rewrite(source), name, filename,
                                 defer_init=defer_init)


_ENV = _Environment(undefined=Undefined, autoescape=False, keep_trailing_newline=True)
# Deterministic: the router renders templates, and a redelivered command renders them again.
del _ENV.filters["random"]
del _ENV.globals["lipsum"]
_ENV.globals["range"] = bounded_range
_ENV.filters.update(FILTERS)
_ENV.tests.update(TESTS)
# Every filter and test spends what it is handed (a `groupby` of 20,000 rows spends 20,000 and
# its reads of the rows' fields one each), so a loop repeating one cannot escape the budget.
_ENV.filters.update({name: metered_filter(f, name) for name, f in _ENV.filters.items()})
_ENV.tests.update({name: metered_test(test, name) for name, test in _ENV.tests.items()})


def has_template(value: object) -> bool:
    return isinstance(value, str) and ("{{" in value or "{%" in value)


def enclosed_expression(text: str) -> str | None:
    """What stands between the outer `{{` and `}}` of `text`, as written; None when `text` does
    not start and end with them. The callers decide what more a single expression must be.
    """
    m = SINGLE_EXPRESSION.match(text)
    return m.group("expr") if m else None


def _single_expression(text: str) -> str | None:
    expr = enclosed_expression(text)
    if expr is None or "{{" in expr or "}}" in expr or "{%" in expr:
        return None
    return expr


@lru_cache(maxsize=4096)
def _compiled_expression(expr: str) -> TemplateExpression:
    return _ENV.compile_expression(expr, undefined_to_none=False)


@lru_cache(maxsize=4096)
def _compiled_template(text: str) -> Template:
    return _ENV.from_string(text)


def syntax_problem(text: str) -> str | None:
    """Why `text` does not parse as a template, or None."""
    try:
        expr = _single_expression(text)
        if expr is not None:
            _compiled_expression(expr)
        else:
            _compiled_template(text)
    except TemplateSyntaxError as exc:
        return exc.message or str(exc)
    return None


def _native(value: object) -> object:
    if isinstance(value, _ChainedRead):
        value.used()
    if isinstance(value, Undefined):
        return None
    return value


def _undefined_message(error: ReadOfUndefined, context: Mapping[str, object]) -> str:
    """`traget` is undefined; did you mean `target`? - suggestions from the mapping the name was
    looked up in, or from the names in scope for a bare name.
    """
    container = error.container
    message = f"`{error.missing_name}` is undefined"
    if container is missing:  # a bare name: suggest from the names in scope
        scope = [str(k) for k in context if not str(k).startswith("_")]
    elif isinstance(container, Mapping):
        scope = [str(k) for k in container]
    else:
        scope = []
        message += " on a null value" if container is None else \
            f" on a value of type {type(container).__name__}"
    close = difflib.get_close_matches(error.missing_name, scope, n=1, cutoff=0.6)
    if close:
        message += f"; did you mean `{close[0]}`?"
    return f"{message} (the template reads `.{error.field}` of it)"


_LOG = logging.getLogger(__name__)


@lru_cache(maxsize=1024)
def _log_once(step: str | None, field: str | None, text: str, message: str) -> None:
    # Once per template and read in a process: a loop renders the same template many times.
    where = "".join(f' {k} "{v}"' for k, v in (("step", step), ("field", field)) if v)
    _LOG.warning("template%s %r: %s; it reads as null here, as in NoETL", where, text, message)


def render_string(text: str, context: Mapping[str, object], *, step: str | None = None,
                  field: str | None = None, own: bool = False) -> object:
    """`text` rendered. `own` (a document of this runtime's, not a playbook: see `render_own`)
    makes a used read of a field of an undefined value an error, and keeps the text one
    expression gives as text.
    """
    if not has_template(text):
        return text
    reads: list[ReadOfUndefined] = []
    token = _READS.set(reads)
    try:
        value = _render_text(text, context, step=step, field=field, own=own)
    finally:
        _READS.reset(token)
    if own and reads:
        raise TemplateError(_undefined_message(reads[0], context), expression=text, step=step,
                            field=field)
    for read in reads:
        _log_once(step, field, text, _undefined_message(read, context))
    return value


def _value_of(template: str, text: str) -> object:
    # A template reading the keychain is rendered by NoETL's worker, which reads JSON only.
    return value_of_json_text(text) if "keychain" in _names_in(template) \
        else value_of_text(text)


def _render_text(text: str, context: Mapping[str, object], *, step: str | None,
                 field: str | None, own: bool) -> object:
    try:
        expr = _single_expression(text)
        if expr is not None:
            compiled = _compiled_expression(expr)
            value = metered(lambda: _native(compiled(**context)))
            # Text one expression gives reads as the value it spells too (`{{ s }}` with
            # `s: "42"` is 42, `{{ x | tojson }}` the mapping again), as NoETL's Rust engines
            # read every rendered field (dsl/rendered_text.py).
            return _value_of(text, value) if isinstance(value, str) and not own else value
        # Text of several parts reads as the value it spells, as in NoETL (dsl/rendered_text.py).
        return _value_of(text, metered(lambda: _bounded_text(_compiled_template(text), context)))
    except ReadOfUndefined as exc:
        raise TemplateError(_undefined_message(exc, context), expression=text, step=step,
                            field=field) from None
    except JinjaTemplateError as exc:
        raise TemplateError(exc.message or str(exc), expression=text, step=step, field=field) from None
    except TemplateError:
        raise
    except TemplateBound as exc:
        raise TemplateError(str(exc), expression=text, step=step, field=field) from None
    except Exception as exc:
        # Whatever a template raises (OverflowError, MemoryError, RecursionError, a bound) is an
        # error of that template, never of the process rendering it.
        raise TemplateError(f"{type(exc).__name__}: {exc}", expression=text, step=step,
                            field=field) from None


def _bounded_text(template: Template, context: Mapping[str, object]) -> str:
    # Checked every OUTPUT_BATCH chunks (C-level slicing and summing): a check per chunk would
    # cost more than rendering them. The root render function is what `render` joins; errors
    # reach render_string as they are (it turns every one into a TemplateError).
    chunks = template.root_render_func(template.new_context(dict(context)))
    out: list[str] = []
    size = 0
    while batch := list(itertools.islice(chunks, OUTPUT_BATCH)):
        size += sum(map(len, batch))
        if size > MAX_OUTPUT:
            raise TemplateBound(f"the template renders more than {MAX_OUTPUT} characters")
        out += batch
    return "".join(out)


@overload
def render(value: JsonObject, context: Mapping[str, object], *,
           step: str | None = None, field: str | None = None) -> dict[str, object]: ...


@overload
def render(value: object, context: Mapping[str, object], *, step: str | None = None,
           field: str | None = None) -> object: ...


def render(value: object, context: Mapping[str, object], *, step: str | None = None,
           field: str | None = None) -> object:
    """Render every template string inside `value` (dicts and lists are walked), all of them
    under one budget: the ten templates of a `set:` together do at most MAX_OPERATIONS.
    """
    return metered(lambda: _render_all(value, context, step=step, field=field))


def render_own(value: JsonObject, context: Mapping[str, object], *,
               field: str | None = None) -> dict[str, object]:
    """Render the templates of a document of this runtime's own (a trigger's payload), where
    NoETL's readings of playbooks do not apply: reading a field of an undefined value (a
    subject trigger fired by hand has no `message`) fails the render naming it instead of
    reading as null, and text one expression gives stays text (an execution id stays the id).
    """
    rendered = metered(lambda: _render_all(value, context, step=None, field=field, own=True))
    assert isinstance(rendered, dict)
    return rendered


@overload
def render_data(value: JsonObject, context: Mapping[str, object], *, step: str | None = None,
                field: str | None = None) -> JsonObject: ...


@overload
def render_data(value: JsonValue, context: Mapping[str, object], *, step: str | None = None,
                field: str | None = None) -> JsonValue: ...


def render_data(value: JsonValue, context: Mapping[str, object], *, step: str | None = None,
                field: str | None = None) -> JsonValue:
    """`render`, as JSON holds the result: what an execution's state commits and a message
    carries (a tuple or set is a list, a value JSON has no word for its text), so a state in
    memory is the state stored. A value nothing can store fails as its template.
    """
    rendered = render(value, context, step=step, field=field)
    try:
        return jsonutil.to_plain(rendered)
    except TypeError:  # an integer past 64 bits, nesting past orjson's limit: name where
        if isinstance(rendered, dict) and isinstance(value, dict):
            for key in sorted(rendered):
                if (problem := jsonutil.storable_problem(rendered[key])) is not None:
                    raise TemplateError(f"the value cannot be stored: {problem}",
                                        expression=str(value.get(key)), step=step,
                                        field=f"{field}.{key}" if field else str(key)) from None
        raise TemplateError(f"the value cannot be stored: {jsonutil.storable_problem(rendered)}",
                            expression=str(value), step=step, field=field) from None


def _render_all(value: object, context: Mapping[str, object], *, step: str | None,
                field: str | None, own: bool = False) -> object:
    if isinstance(value, str):
        return render_string(value, context, step=step, field=field, own=own)
    if isinstance(value, dict):
        return {k: _render_all(v, context, step=step, field=f"{field}.{k}" if field else str(k),
                               own=own)
                for k, v in value.items()}
    if isinstance(value, list):
        return [_render_all(v, context, step=step, field=field, own=own) for v in value]
    return value


_FALSE_WORDS = frozenset({"", "false", "0", "no", "none", "null", "off"})


def truthy(value: object) -> bool:
    """Truth of a rendered guard; text such as "False" from a mixed template counts as false."""
    if isinstance(value, str):
        return value.strip().lower() not in _FALSE_WORDS
    return bool(value)


def evaluate_guard(when: str | None, context: Mapping[str, object], *, step: str | None = None,
                   field: str | None = None) -> bool:
    if when is None:
        return True
    if not has_template(when):
        # A guard written without braces is one expression (`when: "workload.go"`), as NoETL's
        # engines read it; empty text is false.
        if not when.strip():
            return False
        when = "{{ " + when + " }}"
    return truthy(render_string(when, context, step=step, field=field))


def template_strings(value: object) -> Iterator[str]:
    if isinstance(value, str):
        if has_template(value):
            yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from template_strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from template_strings(v)


@lru_cache(maxsize=4096)
def parse_template(text: str) -> nodes.Template:
    """The Jinja AST of a template string; text without `{{`/`{%` is read as one expression
    (how guards written without braces are evaluated). Raises TemplateSyntaxError.
    """
    expr = _single_expression(text) if has_template(text) else text
    source = "{{" + expr + "}}" if expr is not None else text
    return _ENV.parse(source)


@lru_cache(maxsize=4096)
def called_names(text: str) -> frozenset[str]:
    """The bare names a template calls as functions (`token` in `{{ token('x') }}`); none for
    text that does not parse.
    """
    try:
        tree = parse_template(text)
    except TemplateSyntaxError:
        return frozenset()
    return frozenset(call.node.name for call in tree.find_all(nodes.Call)
                     if isinstance(call.node, nodes.Name))


@lru_cache(maxsize=4096)
def _names_in(text: str) -> frozenset[str]:
    try:
        ast = parse_template(text)
    except TemplateSyntaxError:
        return frozenset()
    return frozenset(n.name for n in ast.find_all(nodes.Name) if n.ctx == "load")


def referenced_names(value: object) -> set[str]:
    """Top-level names the templates inside `value` read (to ship only what a command needs)."""
    out: set[str] = set()
    for text in template_strings(value):
        out |= _names_in(text)
    return out
