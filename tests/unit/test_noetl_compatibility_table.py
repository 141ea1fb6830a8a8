"""docs/noetl-compatibility.md is kept honest: every form marked as working names tests that exist,
every refused form says what validation answers, and no row is left without its test."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "noetl-compatibility.md"
FORMS_HEADER = ("form", "defined in", "NoETL's meaning", "status", "here", "test")
SOURCES_HEADER = ("repository", "commit", "files read")
STATUSES = ("works", "works differently", "refused", "not applicable")
TEST_REF = re.compile(r"`(tests/[\w/]+\.py)::(\w+)`")
COMMIT = re.compile(r"^`?[0-9a-f]{40}`?$")


@dataclass(frozen=True)
class Row:
    line: int
    cells: dict[str, str]

    def __str__(self) -> str:
        first = next(iter(self.cells.values()))
        return f"docs/noetl-compatibility.md:{self.line}: {first}"


def _cells(line: str) -> list[str]:
    # `\|` inside a cell is a literal bar (markdown tables escape it so).
    parts = re.split(r"(?<!\\)\|", line.strip().strip("|"))
    return [p.strip().replace("\\|", "|") for p in parts]


def tables(header: tuple[str, ...]) -> list[Row]:
    """The rows of every table in the document whose header is `header`."""
    rows: list[Row] = []
    lines = DOC.read_text().splitlines()
    inside = False
    for number, line in enumerate(lines, start=1):
        if not line.startswith("|"):
            inside = False
            continue
        cells = _cells(line)
        if tuple(cells) == header:
            inside = True
            continue
        if inside and not set("".join(cells)) <= set("-: "):
            assert len(cells) == len(header), f"docs/noetl-compatibility.md:{number}: " \
                f"{len(cells)} cells, the table has {len(header)} columns"
            rows.append(Row(number, dict(zip(header, cells, strict=True))))
    return rows


FORMS = tables(FORMS_HEADER)


def test_the_document_has_its_tables() -> None:
    assert len(FORMS) > 100
    assert len(tables(SOURCES_HEADER)) >= 5


def test_every_row_has_a_known_status_and_says_where_noetl_defines_the_form() -> None:
    bad = [f"{r} (status {r.cells['status']!r})" for r in FORMS if r.cells["status"] not in STATUSES]
    bad += [f"{r} (no 'defined in')" for r in FORMS if not r.cells["defined in"]]
    assert not bad, "\n".join(bad)


def test_every_working_row_names_a_test() -> None:
    missing = [str(r) for r in FORMS if r.cells["status"] in ("works", "works differently")
               and not TEST_REF.search(r.cells["test"]) and r.cells["test"] != "pending"]
    assert not missing, "rows marked works without a test:\n" + "\n".join(missing)


def test_every_named_test_exists() -> None:
    absent: list[str] = []
    for row in FORMS:
        for path, name in TEST_REF.findall(row.cells["test"]):
            file = ROOT / path
            if not file.is_file():
                absent.append(f"{row}: no file {path}")
            elif not re.search(rf"^(async )?def {name}\(", file.read_text(), re.MULTILINE):
                absent.append(f"{row}: {path} has no test {name}")
    assert not absent, "\n".join(absent)


def test_refused_and_not_applicable_rows_say_why() -> None:
    silent = [str(r) for r in FORMS if r.cells["status"] in ("refused", "not applicable", "works differently")
              and len(r.cells["here"]) < 10]
    assert not silent, "rows that do not say the message, the reason or the difference:\n" + \
        "\n".join(silent)


def test_no_row_is_left_pending() -> None:
    pending = [str(r) for r in FORMS if r.cells["test"] == "pending"]
    assert not pending, "rows whose test is still pending:\n" + "\n".join(pending)


@pytest.mark.parametrize("row", tables(SOURCES_HEADER), ids=str)
def test_every_source_read_is_pinned_to_a_commit(row: Row) -> None:
    assert COMMIT.match(row.cells["commit"]) or row.cells["commit"] == "(file)", row
    assert row.cells["files read"], row
