"""`noetl-stream validate`: check playbooks without running them."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from noetl_stream.cli.common import EXIT_OK, EXIT_REJECTED
from noetl_stream.cli.loading import load_reporting, subscription_reporting
from noetl_stream.dsl.subscription import STORED as SUBSCRIPTION_STORED
from noetl_stream.dsl.subscription import Subscription
from noetl_stream.triggers.kind import is_trigger_file


@click.command()
@click.argument("playbooks", nargs=-1, required=True, type=click.Path(path_type=Path, dir_okay=False))
@click.option("--strict", is_flag=True,
              help="Treat unknown keys, fields without effect, suspect template reads and "
                   "unreachable steps as errors.")
def validate(playbooks: tuple[Path, ...], strict: bool) -> None:
    """Check PLAYBOOKS (and trigger documents) and print every problem as
    FILE:LINE: step "S" field "F": message.
    """
    bad = 0
    for path in playbooks:
        if is_trigger_file(path):
            from noetl_stream.cli.trigger_cmd import check_trigger_file  # nats-py and the models

            bad += not check_trigger_file(path)
            continue
        subscription = subscription_reporting(path)
        if subscription is not True:
            if isinstance(subscription, Subscription):
                click.echo(f"{path}: ok (Subscription, {subscription.spec.source} "
                           f"{subscription.spec.mode} to {subscription.spec.dispatch.playbook}; "
                           f"{SUBSCRIPTION_STORED})")
            else:
                bad += 1
            continue
        result = load_reporting(path, strict=strict)
        if result is None:
            bad += 1
            continue
        warned = len(result.warnings)  # each printed above; `--strict` makes them errors
        click.echo(f"{path}: ok ({len(result.playbook.steps)} steps"
                   + (f", {warned} warning{'s' if warned != 1 else ''})" if warned else ")"))
    sys.exit(EXIT_REJECTED if bad else EXIT_OK)
