"""`noetl-stream run`: the command line of a run; what it does is cli/running.py."""

from __future__ import annotations

from pathlib import Path

import click

from noetl_stream.cli.common import (
    EXIT_REJECTED,
    POSITIVE_SECONDS,
    fail,
    nats_url_option,
    prefix_option,
    remote_options,
    verbosity,
)
from noetl_stream.cli.services import http_address


@click.command()
@click.argument("playbook", type=click.Path(path_type=Path, dir_okay=False))
@nats_url_option
@prefix_option
@remote_options
@click.option("--payload", default=None, metavar="JSON", help="JSON object merged over the workload.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="Set one workload key (dots nest; VALUE is JSON or a plain string). Repeatable.")
@click.option("--label", "label_items", multiple=True, metavar="KEY=VALUE",
              help="A label to find the execution by (executions --label). Repeatable.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document with the outcome on stdout.")
@click.option("--strict", is_flag=True,
              help="Treat unknown keys and fields without effect as errors.")
@click.option("--timeout", "timeout_s", type=POSITIVE_SECONDS, default=None, metavar="SECONDS",
              help="Stop waiting after SECONDS: exit 4 with the id; the execution keeps running.")
@click.option("--detach", is_flag=True,
              help="Print the execution id once the request is stored, and exit 0 (needs "
                   "--nats-url or --server: the embedded stack stops with the command).")
@click.option("--quiet", "-q", is_flag=True, help="No live progress.")
@click.option("--ui", "ui", is_flag=True, help="Serve the web UI and API on a local port and print "
              "the execution page's URL; after the end the page stays up until Ctrl-C.")
@click.option("--ui-address", default="127.0.0.1:0", show_default=True, metavar="HOST:PORT",
              help="Where --ui listens (port 0: any free port).")
def run(playbook: Path, nats_url: str | None, prefix: str, server_url: str | None, token: str | None,
        payload: str | None, sets: tuple[str, ...], label_items: tuple[str, ...], as_json: bool,
        strict: bool,
        timeout_s: float | None, detach: bool, quiet: bool, ui: bool, ui_address: str) -> None:
    """Run PLAYBOOK (a file, or a path registered in the catalog) and wait for its result,
    showing live progress on stderr.

    Without --nats-url this starts an embedded nats-server, a server and a worker in this process:
    the same code path as the distributed deployment. With --server it runs on that server,
    sent and followed over its HTTP API.
    """
    # Here, not at the top: `run --help` needs none of the runtime that running.py imports.
    from noetl_stream.cli.running import (
        RunRequest,
        load_or_exit,
        load_registered,
        parse_labels,
        parse_payload,
        refuse_missing_workload,
        report_outcome,
        run_playbook,
    )

    if ui and server_url is not None:
        fail(EXIT_REJECTED, "--ui serves a local run; a server started with --http serves the UI "
                            f"itself at {server_url.rstrip('/')}/")
    if detach and (ui or (nats_url is None and server_url is None)):
        fail(EXIT_REJECTED, "--detach needs --nats-url or --server, where services run the "
                            "execution after this command exits" + (", and no --ui" if ui else ""))
    ui_at = http_address(ui_address) if ui else None
    if playbook.exists() or playbook.suffix in (".yaml", ".yml"):
        text, files = load_or_exit(playbook, strict)
    else:  # not a file: a catalog path (`register` put it there)
        text, files = load_registered(str(playbook), strict, nats_url=nats_url, prefix=prefix,
                                      server_url=server_url, token=token)
    if server_url is not None:
        from noetl_stream.cli.remote_cmds import refuse_file_children

        refuse_file_children(playbook, files)
    payload_data = parse_payload(payload, sets)
    labels = parse_labels(label_items)
    refuse_missing_workload(playbook, files[0].playbook, payload_data)
    request = RunRequest(playbook=playbook, nats_url=nats_url, prefix=prefix, server_url=server_url,
                         token=token, payload=payload_data, timeout_s=timeout_s,
                         quiet=quiet, detach=detach, show_output=verbosity() > 0, ui_at=ui_at,
                         labels=labels)
    report_outcome(run_playbook(request, text, files), as_json, quiet=quiet)
