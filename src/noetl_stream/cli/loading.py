"""Loading playbook files for a command: every issue and warning goes to stderr, once."""

from __future__ import annotations

from pathlib import Path

import click

from noetl_stream.dsl.composition import ComposedResult, load_with_children
from noetl_stream.errors import PlaybookError
from noetl_stream.tools.registry import installed_kinds


def load_reporting(path: Path, *, strict: bool) -> ComposedResult | None:
    """The playbook with its children, or None after printing why it was rejected."""
    try:
        result = load_with_children(path, strict=strict, kinds=installed_kinds())
    except PlaybookError as exc:
        for issue in exc.issues:
            click.echo(str(issue), err=True)
        return None
    for warning in result.warnings:
        click.echo(str(warning), err=True)
    return result
