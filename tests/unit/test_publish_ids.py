"""Publish ids (`Noetl-Publish-Id`, worker/attempt_claims.py tells copies of a command apart by
them): 16 hex digits, a new one per outbox, and a forked child does not repeat its parent's."""

from __future__ import annotations

import os
import re

from noetl_stream.bus.publish import new_publish_id


def test_publish_ids_are_sixteen_hex_digits_and_never_repeat() -> None:
    drawn = [new_publish_id() for _ in range(10_000)]
    assert all(re.fullmatch(r"[0-9a-f]{16}", d) for d in drawn)
    assert len(set(drawn)) == len(drawn)


def test_a_forked_child_draws_other_ids_than_its_parent() -> None:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next ids, then gone without running the parent's cleanup
        os.write(write, " ".join(new_publish_id() for _ in range(3)).encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    child = os.read(read, 1000).decode().split()
    os.close(read)
    parent = [new_publish_id() for _ in range(3)]
    assert len(child) == 3
    assert not set(child) & set(parent)
