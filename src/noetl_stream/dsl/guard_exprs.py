"""Guards and values the dialects compose, as expressions rather than pasted Jinja text.

A dialect that writes a guard for the canonical IR (spec 001's `case` selectors, templated
`next` targets) builds it from these nodes; `template()` turns the tree into the one template
string `Rule.when` / `Arc.when` hold, so the router and the pipeline evaluate it like any guard
an author wrote. An author's own expression enters as `Source` and is kept in parentheses
wherever it is combined, so its precedence never leaks into the guard around it.
"""

from __future__ import annotations

from dataclasses import dataclass


class Expr:
    """A node of a composed expression; `text()` is its Jinja expression source."""

    def text(self) -> str:
        raise NotImplementedError


@dataclass(frozen=True)
class Source(Expr):
    """An expression as the author wrote it (the inside of `{{ ... }}`)."""

    source: str

    def text(self) -> str:
        return self.source


@dataclass(frozen=True)
class Name(Expr):
    """A name the context holds, with an optional path of fields: `outcome.status`."""

    name: str
    fields: tuple[str, ...] = ()

    def text(self) -> str:
        return ".".join((self.name, *self.fields))


@dataclass(frozen=True)
class Const(Expr):
    """A string or boolean constant."""

    value: str | bool

    def text(self) -> str:
        if isinstance(self.value, bool):
            return "true" if self.value else "false"
        return repr(self.value)


@dataclass(frozen=True)
class Group(Expr):
    """An expression in parentheses."""

    inner: Expr

    def text(self) -> str:
        return f"({self.inner.text()})"


@dataclass(frozen=True)
class Compare(Expr):
    left: Expr
    op: str  # "==" or "!="
    right: Expr

    def text(self) -> str:
        return f"{self.left.text()} {self.op} {self.right.text()}"


@dataclass(frozen=True)
class And(Expr):
    parts: tuple[Expr, ...]

    def text(self) -> str:
        return " and ".join(p.text() for p in self.parts)


@dataclass(frozen=True)
class IfElse(Expr):
    """`then if test else otherwise`."""

    then: Expr
    test: Expr
    otherwise: Expr

    def text(self) -> str:
        return f"{self.then.text()} if {self.test.text()} else {self.otherwise.text()}"


@dataclass(frozen=True)
class ListOf(Expr):
    items: tuple[Expr, ...] = ()

    def text(self) -> str:
        return "[" + ", ".join(i.text() for i in self.items) + "]"


@dataclass(frozen=True)
class Concat(Expr):
    """Lists joined with `+`."""

    parts: tuple[Expr, ...]

    def text(self) -> str:
        return " + ".join(p.text() for p in self.parts)


def template(expr: Expr) -> str:
    """The template string that evaluates `expr`: what the IR's guard fields hold."""
    return "{{ " + expr.text() + " }}"


CALL_OK = Compare(Name("outcome", ("status",)), "==", Const("ok"))
"""The last call succeeded."""
STEP_NOT_FAILED = Compare(Name("event", ("name",)), "!=", Const("step.failed"))
"""The step is not being routed as failed (an arc's guard)."""
