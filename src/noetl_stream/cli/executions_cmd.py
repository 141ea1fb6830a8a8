"""`noetl-stream executions ...`: commands about many executions at once."""

from __future__ import annotations

import click

from noetl_stream.cli.purge_cmd import purge


@click.group("executions")
def executions() -> None:
    """Executions in bulk: purge finished ones."""


executions.add_command(purge)
