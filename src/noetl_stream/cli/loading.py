"""Loading playbook files for a command: every issue and warning goes to stderr, once."""

from __future__ import annotations

from pathlib import Path

import click

from noetl_stream.dsl.composition import ComposedResult, load_with_children
from noetl_stream.dsl.source import load_yaml
from noetl_stream.dsl.subscription import Subscription, is_subscription, subscription_from_doc
from noetl_stream.errors import NoetlStreamError, PlaybookError
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


def subscription_reporting(path: Path) -> Subscription | bool:
    """A `kind: Subscription` file as its typed model, or False after printing why it was
    rejected; True when the file is not a Subscription (the caller loads it as a playbook).
    """
    try:
        text = path.read_text(encoding="utf-8")
        doc = load_yaml(text)
    except (OSError, UnicodeDecodeError, NoetlStreamError):
        return True  # the playbook loader reports what is wrong with the file
    if not is_subscription(doc):
        return True
    try:
        return subscription_from_doc(doc, str(path))
    except PlaybookError as exc:
        for issue in exc.issues:
            click.echo(str(issue), err=True)
        return False
