"""`noetl-stream`: click commands with no logic of their own; they call runtime/ and dsl/.

Exit codes (the conformance contract): 0 completed, 1 failed or cancelled, 2 rejected input or
usage error, 3 infrastructure error; 130 when Ctrl-C stops `run` waiting (the execution goes on).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import select
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import click
import orjson

from noetl_stream import __version__, config, jsonutil
from noetl_stream.cli.backup_cmd import backup, restore
from noetl_stream.cli.cancel_cmd import cancel
from noetl_stream.cli.catalog_cmd import register
from noetl_stream.cli.common import (
    EXIT_FAILED,
    EXIT_INFRA,
    EXIT_OK,
    EXIT_REJECTED,
    fail,
    nats_url_option,
    prefix_option,
    remote_options,
    run_async,
)
from noetl_stream.cli.credential import credential
from noetl_stream.cli.dlq_cmd import dlq
from noetl_stream.cli.executions_cmd import executions
from noetl_stream.cli.loading import load_reporting
from noetl_stream.cli.logs_cmd import logs
from noetl_stream.cli.signal_cmd import send_signal
from noetl_stream.cli.status_cmd import status
from noetl_stream.cli.tools_cmd import tools
from noetl_stream.cli.user_cmd import apikey, user
from noetl_stream.dsl.composition import PlaybookFile, load_with_children
from noetl_stream.errors import InfrastructureError, PlaybookError
from noetl_stream.tools.registry import installed_kinds


def _write_stdout(data: bytes) -> None:
    """Write a whole document and a newline to stdout, however slowly the reader drains the pipe.

    A large result written through sys.stdout to a pipe was seen cut short (a partial write that
    was never resumed), so the bytes go out in a loop that resumes partial writes and waits out
    a full pipe.
    """
    data += b"\n"
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        click.echo(data.decode(), nl=False)  # not a real file (a test runner's buffer)
        return
    sys.stdout.flush()
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except BlockingIOError:
            select.select([], [fd], [])
            continue
        view = view[written:]


def _level(verbose: int) -> int:
    return logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG


def _setup_logging(verbose: int, fmt: str = "text") -> None:
    from noetl_stream.observe.logfmt import configure

    configure(_level(verbose), fmt)


metrics_option = click.option(
    "--metrics", default=None, metavar="HOST:PORT",
    help="Serve Prometheus /metrics there, without authentication (a server adds /health).")
log_format_option = click.option(
    "--log-format", type=click.Choice(["text", "json"]), default="text", show_default=True,
    envvar="NOETL_STREAM_LOG_FORMAT",
    help="Log lines on stderr as text or as one JSON object per line (env NOETL_STREAM_LOG_FORMAT).")


EXIT_INTERRUPTED = 130  # 128 + SIGINT, what shells report for a Ctrl-C


def _v_flags(token: str) -> int:
    """How many -v a token means (`-v` 1, `-vv` 2, `--verbose` 1); 0 for any other token."""
    if token == "--verbose":
        return 1
    if len(token) > 1 and token[0] == "-" and set(token[1:]) == {"v"}:
        return len(token) - 1
    return 0


class _Cli(click.Group):
    """The command group, taking `-v` anywhere on the line (`noetl-stream run x.yaml -v` too):
    people add it at the end when a command misbehaves, and every subcommand logs the same way.
    """

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        end = args.index("--") if "--" in args else len(args)
        ctx.meta["verbose"] = sum(_v_flags(a) for a in args[:end])
        kept = [a for a in args[:end] if not _v_flags(a)] + args[end:]
        return super().parse_args(ctx, kept)


@click.group(cls=_Cli, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="noetl-stream")
@click.option("-v", "--verbose", count=True,
              help="More logging on stderr (-v info, -vv debug); anywhere on the line.")
@click.pass_context
def main(ctx: click.Context, verbose: int) -> None:
    """Run NoETL playbooks on NATS JetStream.

    \b
    Quick start (no setup; starts an embedded nats-server):
      noetl-stream run playbooks/examples/hello.yaml
    \b
    As services:
      noetl-stream init   --nats-url nats://127.0.0.1:4222
      noetl-stream server --nats-url nats://127.0.0.1:4222
      noetl-stream worker --nats-url nats://127.0.0.1:4222 --pool default
      noetl-stream run playbook.yaml --nats-url nats://127.0.0.1:4222
    """
    _setup_logging(_verbosity())


def _verbosity() -> int:
    """How many -v the line holds, wherever they stand (the group counts them, `_Cli`)."""
    root = click.get_current_context().find_root()
    return int(root.params.get("verbose") or 0) + int(root.meta.get("verbose", 0))


def _parse_payload(payload: str | None, sets: tuple[str, ...]) -> dict[str, Any]:
    data: dict[str, Any] = {}
    if payload:
        try:
            loaded = jsonutil.loads(payload)
        except ValueError as exc:
            fail(EXIT_REJECTED, f"--payload is not valid JSON: {exc}")
        if not isinstance(loaded, dict):
            fail(EXIT_REJECTED, "--payload must be a JSON object")
        data.update(loaded)
    for item in sets:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            fail(EXIT_REJECTED, f"--set expects KEY=VALUE, got {item!r}")
        try:
            value: Any = jsonutil.loads(raw)
        except ValueError:
            value = raw  # a bare word is a string
        target = data
        parts = key.split(".")
        for part in parts[:-1]:
            target = target.setdefault(part, {})
        target[parts[-1]] = value
    return data


def _load_or_exit(path: Path, strict: bool) -> tuple[str, list[PlaybookFile]]:
    try:
        result = load_with_children(path, strict=strict, kinds=installed_kinds())
    except PlaybookError as exc:
        for issue in exc.issues:
            click.echo(str(issue), err=True)
        errors = sum(1 for i in exc.issues if i.severity == "error")
        fail(EXIT_REJECTED, f"{path}: rejected ({errors} error{'s' if errors != 1 else ''}); "
              "nothing was run")
    for warning in result.warnings:
        click.echo(str(warning), err=True)
    return result.files[0].text, result.files


@main.command()
@click.argument("playbook", type=click.Path(path_type=Path, dir_okay=False))
@nats_url_option
@prefix_option
@remote_options
@click.option("--payload", default=None, metavar="JSON", help="JSON object merged over the workload.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="Set one workload key (dots nest; VALUE is JSON or a plain string). Repeatable.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document with the outcome on stdout.")
@click.option("--strict", is_flag=True,
              help="Treat unknown keys and fields without effect as errors.")
@click.option("--timeout", "timeout_s", type=float, default=None, help="Give up waiting after SECONDS.")
@click.option("--quiet", "-q", is_flag=True, help="No live progress.")
@click.option("--ui", "ui", is_flag=True, help="Serve the web UI and API on a local port and print "
              "the execution page's URL; after the end the page stays up until Ctrl-C.")
@click.option("--ui-address", default="127.0.0.1:0", show_default=True, metavar="HOST:PORT",
              help="Where --ui listens (port 0: any free port).")
def run(playbook: Path, nats_url: str | None, prefix: str, server_url: str | None, token: str | None,
        payload: str | None, sets: tuple[str, ...], as_json: bool, strict: bool,
        timeout_s: float | None, quiet: bool, ui: bool, ui_address: str) -> None:
    """Run PLAYBOOK and wait for its result, showing live progress on stderr.

    Without --nats-url this starts an embedded nats-server, a server and a worker in this process:
    the same code path as the distributed deployment. With --server it runs on that server,
    sent and followed over its HTTP API.
    """
    if ui and server_url is not None:
        fail(EXIT_REJECTED, "--ui serves a local run; a server started with --http serves the UI "
                            f"itself at {server_url.rstrip('/')}/")
    ui_at = _http_address(ui_address) if ui else None
    from noetl_stream.cli.pickup import PickupWatch
    from noetl_stream.cli.progress import ProgressPrinter
    from noetl_stream.cli.remote import RemoteError
    from noetl_stream.cli.remote_cmds import refuse_file_children, run_remote
    from noetl_stream.runtime.services import open_stack, run_services, submit_and_watch
    from noetl_stream.state.catalog import register_files
    from noetl_stream.state.results import ResultStore

    text, files = _load_or_exit(playbook, strict)
    if server_url is not None:
        refuse_file_children(playbook, files)
    if nats_url is None and server_url is None:  # the embedded server and worker run here
        from noetl_stream.observe import tracing

        tracing.setup("noetl-stream")
    data = _parse_payload(payload, sets)
    # -v also shows what each task printed (the `output` of outcome events).
    printer = ProgressPrinter(show_output=_verbosity() > 0)
    seen: dict[str, str] = {}
    pickup = PickupWatch()
    started: list[str] = []

    def on_event(event: dict[str, Any]) -> None:
        seen.setdefault("execution_id", str(event.get("execution_id")))
        pickup(event)
        if not quiet:
            printer(event)

    async def go() -> dict[str, Any]:
        if server_url is not None:
            return await run_remote(server_url, token, playbook_text=text, payload=data,
                                    on_event=on_event, timeout_s=timeout_s)
        embedded = nats_url is None
        announce = None if quiet else _announce
        async with open_stack(nats_url, prefix=prefix, on_embedded=announce) as stack:
            services = run_services(stack.bus) if embedded else contextlib.nullcontext()
            async with services, _run_ui(stack.bus, ui_at, embedded=embedded) as ui_url:
                if any(f.links for f in files):  # children named by file travel via the catalog
                    await register_files(stack.bus.js, files)

                def on_started(execution_id: str) -> None:
                    started.append(execution_id)
                    if ui_url is not None:
                        click.echo(f"execution page: {ui_url}/executions/{execution_id}", err=True)

                # Said even with --quiet (on stderr): a run nobody serves must not look hung.
                warner = asyncio.create_task(pickup.warn_later(
                    stack.bus, lambda: started[0] if started else None,
                    lambda text: click.echo(f"noetl-stream: {text}", err=True)))
                try:
                    final = await submit_and_watch(stack.bus, playbook_text=text,
                                                   playbook_file=str(playbook), payload=data,
                                                   on_event=on_event, on_started=on_started,
                                                   timeout_s=timeout_s)
                finally:
                    warner.cancel()
                if ui_url is not None:
                    click.echo(f"execution {final.get('execution_id')} "
                               f"{final.get('status') or final.get('event_type')}; the UI stays "
                               f"at {ui_url}/ until Ctrl-C", err=True)
                    await _serve_forever(asyncio.Event())
                # Large results arrive as references to the object store; show their values.
                resolved: dict[str, Any] = await ResultStore(stack.bus.js).resolve(final)
                return resolved

    try:
        final = run_async(go())
    except KeyboardInterrupt:
        _interrupted(seen.get("execution_id"), nats_url=nats_url, server_url=server_url)
    except RemoteError as exc:
        fail(exc.exit_code, str(exc))
    except InfrastructureError as exc:
        fail(EXIT_INFRA, str(exc))
    except TimeoutError:
        fail(EXIT_INFRA, f"no result within {timeout_s:g}s")
    if final.get("event_type") == "execution.rejected":
        for err in final.get("errors", []):
            click.echo(err, err=True)
        fail(EXIT_REJECTED, "the server rejected the playbook")
    summary = {k: final.get(k) for k in ("execution_id", "status", "result", "error", "steps",
                                         "ctx", "vars")}
    completed = summary["status"] == "completed"
    if as_json:
        _write_stdout(jsonutil.dumps(summary))
    elif completed:
        # Progress went to stderr; the result alone goes to stdout, so it pipes into jq. A failed
        # or cancelled execution has no result to pipe: stdout stays empty, the exit code says.
        _write_stdout(orjson.dumps(summary.get("result"), option=orjson.OPT_INDENT_2, default=str))
    sys.exit(EXIT_OK if completed else EXIT_FAILED)


@contextlib.asynccontextmanager
async def _run_ui(bus: Any, address: tuple[str, int] | None, *,
                  embedded: bool) -> AsyncIterator[str | None]:
    """The API and UI of `run --ui`, or nothing. On the embedded stack nobody else shares the
    bus and its nats-server already answers anyone on this machine without a password, so the
    API asks for none either; on a shared bus (--nats-url) users log in as on `server --http`.
    """
    if address is None:
        yield None
        return
    from noetl_stream.api import serve

    async with serve(bus, host=address[0], port=address[1], auth=not embedded) as url:
        yield url


def _interrupted(execution_id: str | None, *, nats_url: str | None,
                 server_url: str | None) -> None:
    """Ctrl-C stops waiting, not the execution: say so, and how to follow or stop it."""
    if execution_id is None:
        fail(EXIT_INTERRUPTED, "interrupted before the execution was started")
    where = f" --server {server_url}" if server_url else f" --nats-url {nats_url}" if nats_url else ""
    lines = [f"interrupted: execution {execution_id} was not cancelled and keeps running"]
    if server_url is None and nats_url is None:
        lines.append("  (on the embedded nats-server: it goes on when a server and a worker run "
                     "there, e.g. `noetl-stream nats` and `noetl-stream server/worker --nats-url URL`)")
    lines.append(f"  follow it: noetl-stream watch {execution_id}{where}")
    lines.append(f"  stop it:   noetl-stream cancel {execution_id}{where}")
    click.echo("noetl-stream: " + "\n".join(lines), err=True)
    sys.exit(EXIT_INTERRUPTED)


@main.command()
@click.argument("playbooks", nargs=-1, required=True, type=click.Path(path_type=Path, dir_okay=False))
@click.option("--strict", is_flag=True,
              help="Treat unknown keys and fields without effect as errors.")
def validate(playbooks: tuple[Path, ...], strict: bool) -> None:
    """Check PLAYBOOKS and print every problem as FILE:LINE: step "S" field "F": message."""
    bad = 0
    for path in playbooks:
        result = load_reporting(path, strict=strict)
        if result is None:
            bad += 1
            continue
        click.echo(f"{path}: ok ({len(result.playbook.steps)} steps)")
    sys.exit(EXIT_REJECTED if bad else EXIT_OK)


async def _serve_forever(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    await stop.wait()


def _announce(nats: Any) -> None:
    from noetl_stream.runtime.nats_server import binary_version

    if nats.binary is None:
        click.echo(f"using the running nats-server at {nats.url} (store {nats.store_dir})", err=True)
        return
    click.echo(f"embedded {binary_version(nats.binary)} at {nats.url} (binary {nats.binary}, "
               f"store {nats.store_dir})", err=True)


@main.command()
@nats_url_option
@prefix_option
@click.option("--http", "http", default=None, metavar="HOST:PORT",
              help="Also serve the HTTP API there (docs/api.md), e.g. 127.0.0.1:8082.")
@click.option("--no-auth", is_flag=True, help="HTTP API without authentication: every caller is "
              "an admin. Only for a machine nobody else can reach.")
@click.option("--cors-origin", default=None, metavar="ORIGIN",
              help="Send CORS headers allowing this origin (none by default).")
@metrics_option
@log_format_option
def server(nats_url: str | None, prefix: str, http: str | None, no_auth: bool,
           cors_origin: str | None, metrics: str | None, log_format: str) -> None:
    """Run the server: consume execution requests and outcome events, route, publish commands."""
    from noetl_stream.runtime.services import open_stack, run_services

    _service_setup("noetl-stream-server", log_format)
    address = _http_address(http) if http else None
    metrics_address = _http_address(metrics, "--metrics") if metrics else None

    async def go() -> None:
        async with open_stack(nats_url, prefix=prefix, name="noetl-stream-server",
                              on_embedded=_announce) as stack, \
                run_services(stack.bus, server=True, worker=False), \
                _metrics_endpoint(stack.bus, metrics_address, cluster=True), \
                _http_api(stack.bus, address, auth=not no_auth, cors_origin=cors_origin):
            click.echo("server running; Ctrl-C stops it", err=True)
            await _serve_forever(asyncio.Event())

    try:
        run_async(go())
    except InfrastructureError as exc:
        fail(EXIT_INFRA, str(exc))


def _http_address(text: str, option: str = "--http") -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        fail(EXIT_REJECTED, f"{option} expects HOST:PORT, got {text!r}")
    return host or "127.0.0.1", int(port)


def _service_setup(service: str, log_format: str) -> None:
    """Logging in the chosen format, and tracing when OTEL_* (or the test exporter) asks for it."""
    from noetl_stream.observe import tracing

    _setup_logging(_verbosity(), log_format)
    tracing.setup(service)


@contextlib.asynccontextmanager
async def _metrics_endpoint(bus: Any, address: tuple[str, int] | None, *,
                            cluster: bool) -> AsyncIterator[None]:
    if address is None:
        yield
        return
    from noetl_stream.observe.endpoint import serve_metrics

    async with serve_metrics(address[0], address[1], bus=bus, cluster=cluster) as url:
        click.echo(f"metrics at {url}/metrics (no authentication)", err=True)
        yield


@contextlib.asynccontextmanager
async def _http_api(bus: Any, address: tuple[str, int] | None, *, auth: bool,
                    cors_origin: str | None) -> AsyncIterator[None]:
    if address is None:
        yield
        return
    from noetl_stream.api import serve

    if not auth:
        click.echo("WARNING: the HTTP API runs WITHOUT AUTHENTICATION (--no-auth): anyone who "
                   "reaches it is an admin and can read credentials", err=True)
    # A port it cannot bind is an InfrastructureError naming the address (http_site.py).
    async with serve(bus, host=address[0], port=address[1], auth=auth,
                     cors_origin=cors_origin) as url:
        click.echo(f"HTTP API at {url} (docs/api.md)", err=True)
        yield


@main.command()
@nats_url_option
@prefix_option
@click.option("--pool", default="default", show_default=True, help="Worker pool to take commands from.")
@click.option("--concurrency", default=64, show_default=True, help="Commands run at once.")
@click.option("--python-processes", default=8, show_default=True, help="Warm python interpreters.")
@metrics_option
@log_format_option
def worker(nats_url: str | None, prefix: str, pool: str, concurrency: int, python_processes: int,
           metrics: str | None, log_format: str) -> None:
    """Run a worker: pull commands of POOL, run their task pipelines, publish outcomes."""
    from noetl_stream.runtime.services import open_stack, run_services

    _service_setup(f"noetl-stream-worker-{pool}", log_format)
    metrics_address = _http_address(metrics, "--metrics") if metrics else None

    async def go() -> None:
        async with open_stack(nats_url, prefix=prefix, pools=(pool,), name=f"noetl-stream-worker-{pool}",
                              on_embedded=_announce) as stack, \
                run_services(stack.bus, server=False, worker=True, pool=pool,
                             concurrency=concurrency, python_children=python_processes), \
                _metrics_endpoint(stack.bus, metrics_address, cluster=False):
            click.echo(f"worker running on pool {pool!r}; Ctrl-C stops it", err=True)
            await _serve_forever(asyncio.Event())

    try:
        run_async(go())
    except InfrastructureError as exc:
        fail(EXIT_INFRA, str(exc))


@main.command()
@nats_url_option
@prefix_option
@click.option("--pool", "pools", multiple=True, default=("default",), show_default=True,
              help="Worker pools to create consumers for. Repeatable.")
@click.option("--replicas", type=click.IntRange(1, 5), default=None, envvar=config.ENV_REPLICAS,
              help="JetStream replicas of streams, buckets and object stores (3 in a cluster); "
                   "unset, existing ones keep theirs.")
def init(nats_url: str | None, prefix: str, pools: tuple[str, ...], replicas: int | None) -> None:
    """Provision streams, consumers and KV buckets (idempotent); report drift."""
    from noetl_stream.runtime.connection import connect
    from noetl_stream.runtime.nats_server import start_nats_server
    from noetl_stream.runtime.provision import provision

    async def go() -> list[str]:
        url = nats_url
        nats = None
        if url is None:
            nats = await start_nats_server(config.home_dir() / "nats")
            url = nats.url
        try:
            bus = await connect(url, prefix=prefix)
            try:
                return (await provision(bus, pools, replicas=replicas)).lines()
            finally:
                await bus.close()
        finally:
            if nats is not None:
                await nats.stop()

    try:
        lines = run_async(go())
    except InfrastructureError as exc:
        fail(EXIT_INFRA, str(exc))
    for line in lines:
        click.echo(line)
    if any(line.startswith("DRIFT") for line in lines):
        sys.exit(EXIT_FAILED)


@main.command()
@click.argument("execution_id")
@nats_url_option
@prefix_option
@remote_options
@click.option("--json", "as_json", is_flag=True, help="Print each event as one JSON line.")
def watch(execution_id: str, nats_url: str | None, prefix: str, server_url: str | None,
          token: str | None, as_json: bool) -> None:
    """Follow an execution's events live until it ends (like nats sub 'noetl.events.<id>.>').

    An execution that has ended is shown from its first event to its last, with the durations
    it had. An id nothing was recorded for exits 2.
    """
    from noetl_stream.cli.execution_log import is_known
    from noetl_stream.cli.progress import ProgressPrinter
    from noetl_stream.runtime.connection import connect
    from noetl_stream.runtime.watcher import END_EVENTS, ExecutionWatch
    from noetl_stream.state.results import ResultStore

    if nats_url is None and server_url is None:
        fail(EXIT_REJECTED, "watch needs --nats-url (or NOETL_STREAM_NATS_URL) or --server")
    printer = ProgressPrinter(sys.stdout, show_output=_verbosity() > 0)

    def on_event(event: dict[str, Any]) -> None:
        if as_json:
            click.echo(jsonutil.dumps_str(event))
        else:
            printer(event)

    if server_url is not None:
        from noetl_stream.cli.remote_cmds import call, watch_remote

        final = call(watch_remote(server_url, token, execution_id, on_event))
        sys.exit(EXIT_OK if final.get("status") == "completed" else EXIT_FAILED)

    async def go() -> dict[str, Any] | None:
        bus = await connect(str(nats_url), prefix=prefix)
        results = ResultStore(bus.js)
        events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        w = ExecutionWatch(bus, execution_id, events.put_nowait)
        try:
            if not await is_known(bus, execution_id):
                return None  # waiting would wait forever for an id nobody started
            await w.start()
            while True:
                event = await events.get()
                # JSON lines show large results' values, not their object store references.
                on_event(await results.resolve(event) if as_json else event)
                if event.get("event_type") in END_EVENTS:
                    return event
        finally:
            await w.stop()
            await bus.close()

    try:
        watched = run_async(go())
    except InfrastructureError as exc:
        fail(EXIT_INFRA, str(exc))
    if watched is None:
        fail(EXIT_REJECTED, f"no execution {execution_id} is known")
    sys.exit(EXIT_OK if watched.get("status") == "completed" else EXIT_FAILED)


@main.command("nats")
@click.option("--port", type=click.IntRange(1, 65535), default=None,
              help="Client port (default: a free one, recorded in the store folder).")
@click.option("--store", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="Folder of the server's config, log and JetStream store "
                   "[default: $NOETL_STREAM_HOME/nats].")
def nats_cmd(port: int | None, store: Path | None) -> None:
    """Run the embedded nats-server in the foreground (store under NOETL_STREAM_HOME)."""
    from noetl_stream.runtime.nats_server import binary_version, start_nats_server

    async def go() -> None:
        srv = await start_nats_server(store or config.home_dir() / "nats", port=port)
        if not srv.owned:
            click.echo(f"a nats-server for this home is already running at {srv.url}", err=True)
            return
        click.echo(f"{binary_version(srv.binary) if srv.binary else 'nats-server'} at {srv.url} "
                   f"(binary {srv.binary}, store {srv.store_dir}); Ctrl-C stops it", err=True)
        try:
            await _serve_forever(asyncio.Event())
        finally:
            await srv.stop()

    try:
        run_async(go())
    except InfrastructureError as exc:
        fail(EXIT_INFRA, str(exc))


@main.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print the completion script for SHELL.

    \b
    bash: eval "$(noetl-stream completion bash)"     (in ~/.bashrc)
    zsh:  eval "$(noetl-stream completion zsh)"      (in ~/.zshrc)
    fish: noetl-stream completion fish > ~/.config/fish/completions/noetl-stream.fish
    """
    from click.shell_completion import get_completion_class

    completion_class = get_completion_class(shell)
    assert completion_class is not None  # the three choices are click's own
    click.echo(completion_class(main, {}, "noetl-stream", "_NOETL_STREAM_COMPLETE").source())


main.add_command(tools)
main.add_command(credential)
main.add_command(register)
main.add_command(send_signal)
main.add_command(user)
main.add_command(apikey)
main.add_command(cancel)
main.add_command(status)
main.add_command(dlq)
main.add_command(executions)
main.add_command(backup)
main.add_command(restore)
main.add_command(logs)
