"""Which version of a playbook an event is applied with.

An execution runs the version its state names (`playbook_key`), except that a restart may name
another (`restart --latest`): that restart is applied with the version it names, and if the
router takes it the state names that version from then on (router/restart.py). The server and
the rebuild (`server/replay.py`) choose the same way, so `verify` holds across the switch. A
version no longer readable from the catalog is not chosen: the restart is applied with the
execution's own version and changes none.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field

from nats.js.errors import KeyNotFoundError
from pydantic import BaseModel

from noetl_stream.dsl.models import Playbook
from noetl_stream.errors import PlaybookError
from noetl_stream.events import RestartRequested
from noetl_stream.router.restart import REQUESTED
from noetl_stream.router.state import ExecutionState
from noetl_stream.router_events import RouterEvent


@dataclass
class Cached:
    """An execution's state as a server keeps it between events, with the playbook it runs."""

    state: ExecutionState
    revision: int
    playbook: Playbook
    versions: dict[str, Playbook] = field(default_factory=dict)  # those its events name

    def __post_init__(self) -> None:
        self.key = self.state.playbook_key  # the version `playbook` is

    def follow(self, state: ExecutionState) -> None:
        """Take the version the state names now (a restart may have switched it)."""
        if state.playbook_key != self.key and state.playbook_key in self.versions:
            self.versions[self.key] = self.playbook
            self.playbook, self.key = self.versions[state.playbook_key], state.playbook_key


async def readable_versions(keys: Iterable[str],
                            load: Callable[[str], Awaitable[Playbook]]) -> dict[str, Playbook]:
    """The versions named by `keys` that the catalog still holds and that parse."""
    found = {}
    for key in sorted(keys):
        with contextlib.suppress(KeyNotFoundError, PlaybookError):
            found[key] = await load(key)
    return found


def named_version(event: RouterEvent | Mapping[str, object]) -> str | None:
    """The playbook version a restart event names, None for any other event: one decoded, or a
    body of a log as it was recorded.
    """
    if isinstance(event, RestartRequested):
        return event.playbook_key or None
    # Any other decoded event names none; checked first, as a Mapping check of a model is slow.
    if isinstance(event, BaseModel) or not isinstance(event, Mapping) \
            or event.get("event_type") != REQUESTED:
        return None
    key = event.get("playbook_key")
    return key if isinstance(key, str) and key else None


def named_versions(items: Iterable[tuple[object, RouterEvent | Mapping[str, object]]]) -> set[str]:
    """The versions the restarts among (message, event) pairs name."""
    return {key for _, e in items if (key := named_version(e)) is not None}


def playbook_for(current: Playbook, versions: Mapping[str, Playbook],
                 event: RouterEvent) -> tuple[Playbook, RouterEvent]:
    """(the playbook to apply `event` with, the event as applied): a restart onto a version the
    catalog no longer holds is applied with the current one, as if it named none.
    """
    key = named_version(event)
    if key is None or not isinstance(event, RestartRequested):
        return current, event
    chosen = versions.get(key)
    if chosen is None:
        return current, event.model_copy(update={"playbook_key": None})
    return chosen, event
