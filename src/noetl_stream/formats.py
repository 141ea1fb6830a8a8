"""The versions of what noetl-stream stores, and the chains of migrations that read older ones.

Pure: no I/O. Every record we store as a JSON object carries `schema_version`, the version of
its format; one without it was written before formats had versions and is version 1. A reader
passes what it read through its format's `read`: an older version is migrated one version at a
time up to the current one, so a release reads everything any earlier release wrote. A newer
version cannot be migrated: `read` raises NewerFormat, and `read_newer` keeps it as written
(fields this release does not know are ignored) for readers that only show it. A writer never
rewrites a record newer than it understands: the server refuses such an execution state with a
log line and hands its events back (bus/dispositions.py, `newer_format`), for a server that
reads it.

A format's version changes when a release writes something an earlier one would misread. The
release that changes it adds the migration from the previous version, keeps a golden record of
the new version under tests/fixtures/formats/, and the test that reads every golden record
(tests/unit/test_formats.py) keeps it readable by every later release.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from noetl_stream.errors import NoetlStreamError
from noetl_stream.jsonutil import JsonObject, JsonValue

VERSION_FIELD = "schema_version"
UNVERSIONED = 1  # what was written before formats had versions

Migration = Callable[[JsonObject], JsonObject]


class NewerFormat(NoetlStreamError):
    """A record written by a newer release, in a format this one does not know. Not a
    ValueError: pydantic lets it through its validators unchanged, so the reader sees it.
    """

    def __init__(self, what: str, found: int, known: int) -> None:
        super().__init__(f"{what} has schema version {found}; this release reads versions up to "
                         f"{known}: it is left as it is for a release that reads it")
        self.what = what
        self.found = found
        self.known = known


@dataclass(frozen=True)
class Format:
    """One stored format: its name, current version and migrations (version v -> v + 1)."""

    name: str
    current: int
    migrations: Mapping[int, Migration] = field(default_factory=dict)

    def __post_init__(self) -> None:
        missing = [v for v in range(UNVERSIONED, self.current) if v not in self.migrations]
        if missing:
            raise ValueError(f"{self.name}: no migration from version(s) {missing}")

    def version_of(self, record: Mapping[str, JsonValue]) -> int:
        version = record.get(VERSION_FIELD, UNVERSIONED)
        if not isinstance(version, int) or isinstance(version, bool) or version < UNVERSIONED:
            raise ValueError(f"{self.name}: {VERSION_FIELD} {version!r} is not a version")
        return version

    def is_newer(self, record: Mapping[str, JsonValue]) -> bool:
        return self.version_of(record) > self.current

    def read(self, record: JsonObject, what: str | None = None) -> JsonObject:
        """`record` in the current version (migrated when older; a new dict then). Raises
        NewerFormat for a newer one, naming it as `what` (the format's name by default).
        """
        version = self.version_of(record)
        if version > self.current:
            raise NewerFormat(what or self.name, version, self.current)
        return self._migrated(record, version)

    def read_newer(self, record: dict[str, Any]) -> dict[str, Any]:
        """`read`, except that a newer record is returned as written, for readers that only
        show it (its version stays in it, so whoever would write it can refuse to).
        """
        version = self.version_of(record)
        return record if version > self.current else self._migrated(record, version)

    def stamp(self, record: JsonObject) -> JsonObject:
        """`record` marked with the current version (in place)."""
        record[VERSION_FIELD] = self.current
        return record

    def _migrated(self, record: JsonObject, version: int) -> JsonObject:
        if version == self.current:
            return record
        out = dict(record)
        while version < self.current:
            out = self.migrations[version](out)
            version += 1
            out[VERSION_FIELD] = version
        return out


def _unchanged(record: JsonObject) -> JsonObject:
    """Version 1 to 2 of a format whose fields did not change: only the version is new."""
    return record


# The committed execution state (router/state.py). Version 2 is the first with a version; it
# reads every unversioned state: 0.1.0's, with results inline, and later ones that name stored
# results by `result_key` and settled records by `step_pages` (both forms stay valid). Version 3:
# the keys of stored pages may be folded into `page_index` / `step_page_index` (router/
# page_index.py), which version 2 would not read: it would lose the pages they name.
STATE = Format("execution state", 3, {1: _unchanged, 2: _unchanged})
# An entry of KV noetl_step_results: {"v": value} or {"o": object reference} (a result, a page
# of loop results or of settled step records). Version 3: a record in a page may hold its result
# inline as `result` (no `result_key`), which version 2 would read as no result.
STEP_RESULT = Format("stored step result", 3, {1: _unchanged, 2: _unchanged})
# The claim of a command's attempt (written by earlier releases, still read by
# worker/attempt_claims.py) and the mark of an outbox published (server/outbox_marks.py), both
# new in version 2: no version 1 was ever written.
CLAIM = Format("attempt claim", 2, {1: _unchanged})
OUTBOX_MARK = Format("outbox mark", 2, {1: _unchanged})


def _links_v1(record: JsonObject) -> JsonObject:
    """Version 1 of a catalog entry's links was the mapping itself (path as written -> key)."""
    return {"links": {k: v for k, v in record.items() if k != VERSION_FIELD and isinstance(v, str)}}


# The links of a catalog text (`pb_<hash>.links`, state/catalog.py): {"links": {path: key}}.
CATALOG_LINKS = Format("catalog links", 2, {1: _links_v1})
# Records of the API and the keychain: pydantic models, read through `Format.read`.
CREDENTIAL = Format("credential", 2, {1: _unchanged})
USER = Format("user", 2, {1: _unchanged})
API_KEY = Format("API key", 2, {1: _unchanged})
SESSION = Format("session", 2, {1: _unchanged})
AUTH_CACHE = Format("resolved credential", 2, {1: _unchanged})

FORMATS: tuple[Format, ...] = (STATE, STEP_RESULT, CLAIM, OUTBOX_MARK, CATALOG_LINKS, CREDENTIAL, USER,
                               API_KEY, SESSION, AUTH_CACHE)
