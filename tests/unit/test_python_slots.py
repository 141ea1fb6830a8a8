"""The uid range python children of a root worker run as (tools/python_slots.py)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from noetl_stream.tools import python_slots
from noetl_stream.tools.python_slots import (
    SlotError,
    UidSlots,
    missing_capabilities,
    parse_range,
)


def test_a_range_is_first_dash_last_above_root() -> None:
    assert parse_range("59000-59009") == range(59000, 59010)
    assert parse_range(" 61000 ") == range(61000, 61001)
    for bad in ("", "a-b", "0-10", "10-5", "-5"):
        with pytest.raises(SlotError, match="NOETL_STREAM_PYTHON_UIDS"):
            parse_range(bad)


@pytest.mark.skipif(os.geteuid() != 0, reason="claims live in a folder only root may write")
def test_two_workers_never_claim_the_same_uid_and_a_full_range_is_an_error() -> None:
    uids = range(3_999_990_000, 3_999_990_004)  # no account has these
    first = UidSlots(uids, 2)
    try:
        second = UidSlots(uids, 2)
        try:
            taken = {first.take().uid, first.take().uid, second.take().uid, second.take().uid}
            assert taken == set(uids)
            with pytest.raises(SlotError, match="only 0 free uids"):
                UidSlots(uids, 1)
        finally:
            second.close()
    finally:
        first.close()
    again = UidSlots(uids, 4)  # closing a worker's claims frees them
    again.close()


def test_the_missing_worker_capabilities_are_named_from_the_effective_set() -> None:
    every = (1 << 41) - 1
    assert missing_capabilities(every) == []
    assert missing_capabilities(0b1110_1011) == []  # CHOWN DAC_OVERRIDE FOWNER KILL SETGID SETUID
    assert missing_capabilities(0b1100_1011) == ["CAP_KILL"]
    assert missing_capabilities(0b0000_0100) == [  # DAC_READ_SEARCH alone replaces none
        "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_KILL", "CAP_SETGID", "CAP_SETUID"]


def test_a_world_writable_folder_without_the_sticky_bit_gets_it(tmp_path: Path) -> None:
    open_folder, sticky, private = tmp_path / "open", tmp_path / "sticky", tmp_path / "private"
    for folder in (open_folder, sticky, private):
        folder.mkdir()
    open_folder.chmod(0o777)
    sticky.chmod(0o1777)
    private.chmod(0o700)
    python_slots.keep_sticky((str(open_folder), str(sticky), str(private), str(tmp_path / "no")))
    assert stat.S_IMODE(open_folder.stat().st_mode) == 0o1777
    assert stat.S_IMODE(sticky.stat().st_mode) == 0o1777
    assert stat.S_IMODE(private.stat().st_mode) == 0o700
