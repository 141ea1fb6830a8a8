"""The keys of stored pages, kept few in the state however many pages there are. Pure.

A loop stores a page of iteration results every PAGE_SIZE iterations, and an execution a page
of settled step records every PAGE_SIZE records (state/step_results.py). Were the state to name
every page, each commit would write one more key per page stored before it: a loop of 100,000
iterations would write 1,000 keys (35 kB) at each of its last commits. So once FOLD keys have
gathered they are themselves stored, as one entry holding that list of keys, and the state names
the entry in the first level of its index; FOLD keys of a level are folded into the next level
the same way. An entry of level i covers FOLD ** (i + 1) pages, and the state names fewer than
FOLD keys per level: at most 27 keys while under 1,000 pages are stored, 36 under 10,000.

In order, the pages are those the highest level's entries cover, then the next level's, down to
the first level's, then the keys not folded yet (`pages`).
"""

from __future__ import annotations

PAGE_SIZE = 100  # loop iteration results (or settled step records) stored together
FOLD = 10  # page keys (or keys of a level) stored together: one more write per FOLD pages
LOOSE = -1  # the level `full` names for the keys not folded yet

Index = list[list[str]]  # level -> keys of its stored entries, oldest first


def full(pages: list[str], index: Index) -> tuple[int, list[str]] | None:
    """The first list of FOLD keys to fold, with its level (LOOSE for `pages`, whose keys
    are folded first); None while no list is full.
    """
    if len(pages) >= FOLD:
        return LOOSE, pages[:FOLD]
    for level, keys in enumerate(index):
        if len(keys) >= FOLD:
            return level, keys[:FOLD]
    return None


def folded(pages: list[str], index: Index, level: int, key: str) -> None:
    """The keys `full` gave for `level` are stored under `key`: the next level names them."""
    del (pages if level == LOOSE else index[level])[:FOLD]
    if level + 1 == len(index):
        index.append([])
    index[level + 1].append(key)


def count(pages: list[str], index: Index) -> int:
    """The pages stored, folded or not."""
    total, covered = len(pages), FOLD  # pages an entry of the level covers
    for keys in index:
        total += len(keys) * covered
        covered *= FOLD
    return total


def any_stored(pages: list[str], index: Index) -> bool:
    return bool(pages) or any(index)
