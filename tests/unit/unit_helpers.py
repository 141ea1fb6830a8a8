"""Inline playbooks for unit tests: a fixed 4-line header plus the body a test writes."""

from __future__ import annotations

import textwrap

from noetl_stream.dsl import Playbook, parse_playbook

HEADER = "apiVersion: noetl.io/v2\nkind: Playbook\nmetadata:\n  name: test\n"
FILE = "test.yaml"


def playbook_text(body: str) -> str:
    """The header followed by `body`; the body's first line is line 5 of the file."""
    return HEADER + textwrap.dedent(body).lstrip("\n")


def parse(body: str, *, strict: bool = False) -> Playbook:
    return parse_playbook(playbook_text(body), FILE, strict=strict).playbook
