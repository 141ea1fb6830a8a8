"""Which executions a list asks for (GET /api/executions): its filters as one predicate, and
the counts per status a list shows beside its page.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from noetl_stream.api.models import ExecutionListQuery
from noetl_stream.router.state import ExecutionState

ERROR_MESSAGE_CHARS = 500  # what a list row shows of an error; the execution's page has it all


def matches(state: ExecutionState, query: ExecutionListQuery, *, status: bool = True) -> bool:
    """True when `state` passes every filter of `query` (the status one only with `status`)."""
    if status and query.status and state.status != query.status:
        return False
    if query.path and state.playbook_path != query.path:
        return False
    if query.since is not None and state.started_at < query.since.timestamp():
        return False
    if query.until is not None and state.started_at >= query.until.timestamp():
        return False
    if query.execution_id and query.execution_id not in state.execution_id:
        return False
    if query.label and not has_label(state, query.label):
        return False
    if query.playbook:
        wanted = query.playbook.casefold()
        names = (state.playbook_path or "", state.playbook_name or "")
        if not any(wanted in name.casefold() for name in names):
            return False
    return True


def has_label(state: ExecutionState, wanted: str) -> bool:
    """`key=value`: the state has that label; `key`: it has the key, with any value."""
    key, eq, value = wanted.partition("=")
    return key in state.labels and (not eq or state.labels[key] == value)


def status_counts(states: Iterable[ExecutionState], query: ExecutionListQuery) -> dict[str, int]:
    """How many executions pass every filter but the status one, by status."""
    counts = Counter(s.status for s in states if matches(s, query, status=False))
    return dict(sorted(counts.items()))


def error_message(state: ExecutionState) -> str | None:
    """The reason a list row shows: the error's message, else its reason, else none."""
    error = state.error
    if not error:
        return None
    text = error.get("message") or error.get("reason")
    if not text:
        return None
    text = str(text)
    return text if len(text) <= ERROR_MESSAGE_CHARS else text[:ERROR_MESSAGE_CHARS - 1] + "…"
