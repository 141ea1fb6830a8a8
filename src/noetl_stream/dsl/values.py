"""Value types templates see besides plain JSON."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, SupportsIndex, overload

# How a ListView crosses to the python tool's child process, which rebuilds it
# (tools/python.py encode_inputs, tools/python_runner.py): `{LIST_MARK: items, "names": {...},
# "itself": [...]}`.
LIST_MARK = "__noetl_list_view__"


class ListView(list[Any]):
    """A list result that also answers named reads, the envelope NoETL's engines put around it.

    `names` maps a name to its value; a name in `itself` reads as the plain list. It iterates,
    indexes, compares and serialises as the list (JSON never sees the names), while `view["n"]`,
    `view.get("n")` and, in templates, `view.n` read the names (kept in underscored attributes,
    which the template sandbox never shows).
    """

    def __init__(self, items: Iterable[Any] = (), names: Mapping[str, Any] | None = None,
                 itself: Iterable[str] = ()) -> None:
        super().__init__(items)
        self._names: dict[str, Any] = dict(names or {})
        self._itself: frozenset[str] = frozenset(itself)

    def has_name(self, key: Any) -> bool:
        return isinstance(key, str) and (key in self._itself or key in self._names)

    def named(self, key: str) -> Any:
        return list(self) if key in self._itself else self._names[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.named(key) if self.has_name(key) else default

    @overload
    def __getitem__(self, key: SupportsIndex) -> Any: ...

    @overload
    def __getitem__(self, key: slice) -> list[Any]: ...

    @overload
    def __getitem__(self, key: str) -> Any: ...

    def __getitem__(self, key: SupportsIndex | slice | str) -> Any:
        if isinstance(key, str):
            if not self.has_name(key):
                raise KeyError(key)
            return self.named(key)
        return super().__getitem__(key)

    def encoded(self) -> dict[str, Any]:
        """The marked mapping the python child rebuilds this view from."""
        return {LIST_MARK: list(self), "names": self._names, "itself": sorted(self._itself)}


class LoopResults(ListView):
    """A loop step's results in iteration order; also reads as NoETL's `{results, count, stats}`.

    `stats` is NoETL's loop aggregation `{total, success, failed}`. A failed iteration fails the
    loop step, so a loop whose results can be read had no failed iteration: `failed` is 0.
    """

    NAMES = frozenset({"results", "count", "stats"})

    def __init__(self, items: Iterable[Any] = ()) -> None:
        super().__init__(items, itself=("results",))
        total = len(self)
        self._names = {"count": total, "stats": {"total": total, "success": total, "failed": 0}}


class StepResult(dict[str, Any]):
    """A step's mapping result read by name. Besides its own keys it answers `data` with itself
    when it has no `data` key, as NoETL's engines wrap a tool's result in `{status, data}`
    (`{{ run_script.data.total }}`). The extra read is answered in templates only
    (dsl/templating.py): the mapping itself, as rendered into JSON or python inputs, is unchanged.
    """


class HttpOutputData(dict[str, Any]):
    """`output.data` of an http call (router/views.py `http_output_data`): a mapping whose
    `data` key, when the body has one, is the body's own `data`, while a template's `.data`
    attribute read gives the whole body, NoETL's Python envelope.
    """

    def __init__(self, items: Mapping[str, Any], *, body: Any) -> None:
        super().__init__(items)
        self._body = body

    @property
    def envelope_data(self) -> Any:
        return self._body

