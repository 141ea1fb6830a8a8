"""The keys of stored pages folded FOLD at a time (router/page_index.py): the state names fewer
than FOLD keys per level, counts every page, and the levels read back in order."""

from __future__ import annotations

from noetl_stream.router import page_index
from noetl_stream.router.page_index import FOLD, Index


def _store(count: int) -> tuple[list[str], Index, dict[str, list[str]]]:
    """`count` pages stored one at a time, folding as a commit does; the entries written."""
    pages: list[str] = []
    index: Index = []
    entries: dict[str, list[str]] = {}
    for n in range(count):
        pages.append(f"page-{n}")
        while (fold := page_index.full(pages, index)) is not None:
            level, keys = fold
            key = f"entry-{len(entries)}"
            entries[key] = keys
            page_index.folded(pages, index, level, key)
    return pages, index, entries


def _read(pages: list[str], index: Index, entries: dict[str, list[str]]) -> list[str]:
    """Every page key in order: the highest level's entries first, down to the loose keys."""
    keys: list[str] = []
    for level in [*reversed(index), pages]:
        keys = [key for entry in keys for key in entries[entry]] + level
    return keys


def test_a_state_names_fewer_than_a_page_of_keys_per_level_however_many_pages() -> None:
    count = FOLD ** 3 * 2 + FOLD * 3 + 7
    pages, index, entries = _store(count)
    assert len(pages) == 7 and [len(keys) for keys in index] == [3, 0, 2]
    assert page_index.count(pages, index) == count
    assert _read(pages, index, entries) == [f"page-{n}" for n in range(count)]
    assert all(len(keys) == FOLD for keys in entries.values())


def test_a_level_emptied_by_folding_still_counts_and_reads_in_order() -> None:
    pages, index, entries = _store(FOLD * FOLD)
    assert pages == [] and index == [[], [f"entry-{FOLD}"]]
    assert page_index.any_stored(pages, index)
    assert page_index.count(pages, index) == FOLD * FOLD
    assert _read(pages, index, entries)[-1] == f"page-{FOLD * FOLD - 1}"
    assert not page_index.any_stored([], [[], []]) and page_index.full([], []) is None
