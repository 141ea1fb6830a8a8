"""`noetl-stream tools`: list every tool kind this installation runs and where each comes from."""

from __future__ import annotations

import click

from noetl_stream import jsonutil
from noetl_stream.tools.registry import ENTRY_POINT_GROUP, tool_origins


@click.command("tools")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object: kind -> origin.")
def tools(as_json: bool) -> None:
    """List tool kinds: built-in, or plugin with its entry point (group noetl_stream.tools)."""
    origins = tool_origins()
    if as_json:
        click.echo(jsonutil.dumps_str(origins))
        return
    width = max(len("KIND"), *(len(kind) for kind in origins))
    click.echo(f"{'KIND':<{width}}  ORIGIN")
    for kind, origin in origins.items():
        click.echo(f"{kind:<{width}}  {origin}")
    if not any(origin.startswith("plugin") for origin in origins.values()):
        click.echo(f"(no plugins installed; they register under the entry point group "
                   f"{ENTRY_POINT_GROUP!r})", err=True)
