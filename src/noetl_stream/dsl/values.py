"""Value types templates see besides plain JSON."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import SupportsIndex, overload

from noetl_stream.jsonutil import JsonObject, JsonValue

# How a ListView crosses to the python tool's child process, which rebuilds it
# (tools/python.py encode_inputs, tools/python_runner_values.py): `{LIST_MARK: items, "names": {...},
# "itself": [...]}`.
LIST_MARK = "__noetl_list_view__"


class ListView(list[JsonValue]):
    """A list result that also answers named reads, the envelope NoETL's engines put around it.

    `names` maps a name to its value; a name in `itself` reads as the plain list. It iterates,
    indexes, compares and serialises as the list (JSON never sees the names), while `view["n"]`,
    `view.get("n")` and, in templates, `view.n` read the names (kept in underscored attributes,
    which the template sandbox never shows).
    """

    def __init__(self, items: Iterable[JsonValue] = (),
                 names: Mapping[str, JsonValue] | None = None, itself: Iterable[str] = ()) -> None:
        super().__init__(items)
        self._names: JsonObject = dict(names or {})
        self._itself: frozenset[str] = frozenset(itself)

    def has_name(self, key: object) -> bool:
        return isinstance(key, str) and (key in self._itself or key in self._names)

    def named(self, key: str) -> JsonValue:
        return list(self) if key in self._itself else self._names[key]

    def get(self, key: str, default: JsonValue = None) -> JsonValue:
        return self.named(key) if self.has_name(key) else default

    @overload
    def __getitem__(self, key: SupportsIndex) -> JsonValue: ...

    @overload
    def __getitem__(self, key: slice) -> list[JsonValue]: ...

    @overload
    def __getitem__(self, key: str) -> JsonValue: ...

    def __getitem__(self, key: SupportsIndex | slice | str) -> JsonValue:
        if isinstance(key, str):
            if not self.has_name(key):
                raise KeyError(key)
            return self.named(key)
        return super().__getitem__(key)

    def encoded(self) -> JsonObject:
        """The marked mapping the python child rebuilds this view from."""
        return {LIST_MARK: list(self), "names": self._names, "itself": [*sorted(self._itself)]}


class LoopResults(ListView):
    """A loop step's results in iteration order; also reads as NoETL's `{results, count, stats}`.

    `stats` is NoETL's loop aggregation `{total, success, failed}`. A failed iteration fails the
    loop step, so a loop whose results can be read had no failed iteration: `failed` is 0.
    """

    def __init__(self, items: Iterable[JsonValue] = ()) -> None:
        super().__init__(items, itself=("results",))
        total = len(self)
        self._names = {"count": total, "stats": {"total": total, "success": total, "failed": 0}}


class EventName(str):
    """The name of the event an arc's guard reads (`event.name`), which also compares equal to
    the names NoETL's engines give the same moment (`aliases`): a plain step's arcs are routed
    on its call's `call.done` / `call.error` by NoETL's Python engine and on `step.done` /
    `step.failed` by spec 003, so both `{{ event.name == 'call.done' }}` and
    `{{ event.name == 'step.done' }}` hold after it succeeds. It prints as its own name.
    """

    _aliases: frozenset[str]

    def __new__(cls, name: str, aliases: Iterable[str] = ()) -> EventName:
        made = super().__new__(cls, name)
        made._aliases = frozenset(aliases)
        return made

    def __eq__(self, other: object) -> bool:
        return str.__eq__(self, other) is True or (isinstance(other, str) and other in self._aliases)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    __hash__ = str.__hash__


LOCATOR_NAMES = frozenset({"_ref", "_uri", "_store"})
Locate = Callable[[], "dict[str, str] | None"]


class ResultMapping(JsonObject):
    """A mapping result read by name that may also answer NoETL's locator names of a result
    stored apart (`_ref`, `_uri`, `_store`; dsl/views.py says when).

    `locate` gives them, or None when the result has none; it runs on the first read of such a
    name (in templates, `{{ step._ref }}`), never for other reads, and never for the JSON or
    python form of the mapping, which is just its keys. The result's own keys win.
    """

    def __init__(self, items: Mapping[str, JsonValue], *, locate: Locate | None = None) -> None:
        super().__init__(items)
        self._locate = locate
        self._located: dict[str, str] | None = None

    def __missing__(self, key: str) -> JsonValue:
        if self._locate is not None and key in LOCATOR_NAMES:
            if self._located is None:
                self._located = self._locate() or {}
            if key in self._located:
                return self._located[key]
        raise KeyError(key)


class DataEnvelope(ResultMapping):
    """A mapping whose `.data` read in a template is NoETL's envelope `data`.

    The read is answered in dsl/templating.py, ahead of the mapping's own `data` key; as JSON, or
    rendered into a python input, it is just the mapping. dsl/views.py makes two kinds:

    - a step's mapping result without a `data` key, read by name: `.data` is the result itself,
      as NoETL wraps a tool's result in `{status, data}` (`{{ run_script.data.total }}`);
    - `output.data` of an http call: `.data` is the whole body even when the body has its own
      `data` key, which the mapping keeps for code (`http_output_data`).
    """

    def __init__(self, items: Mapping[str, JsonValue], *, data: JsonValue,
                 locate: Locate | None = None) -> None:
        super().__init__(items, locate=locate)
        self._data = data

    @property
    def envelope_data(self) -> JsonValue:
        return self._data


def job_view(execution_id: str) -> dict[str, str]:
    """NoETL's `job` namespace: the execution's identity under the names its playbooks read
    (`{{ job.execution_id }}`, `{{ job.uuid }}`, `{{ job.id }}`).
    """
    return {"execution_id": execution_id, "uuid": execution_id, "id": execution_id}
