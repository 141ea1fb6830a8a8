"""What `noetl-stream run` does, as plain functions: load the playbook and its children, read
the payload, run it (on the embedded stack, a NATS URL, or a server over HTTP) while showing
progress, and print the outcome. cli/run_cmd.py only turns the command line into `RunRequest`.

Ctrl-C stops waiting, never the execution; the exit codes are cli/common.py's.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import sys
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import click
import orjson

from noetl_stream import jsonutil
from noetl_stream.cli.common import (
    EXIT_FAILED,
    EXIT_INFRA,
    EXIT_OK,
    EXIT_REJECTED,
    EXIT_STILL_RUNNING,
    fail,
    run_async,
    write_stdout,
)
from noetl_stream.cli.pickup import PickupWatch
from noetl_stream.cli.progress import ProgressPrinter
from noetl_stream.cli.run_summary import summary_of
from noetl_stream.cli.services import announce, serve_forever
from noetl_stream.dsl.composition import PlaybookFile, load_with_children
from noetl_stream.dsl.models import Playbook
from noetl_stream.errors import InfrastructureError, PlaybookError
from noetl_stream.jsonutil import JsonObject, JsonValue
from noetl_stream.tools.registry import installed_kinds

if TYPE_CHECKING:
    from noetl_stream.bus.connection import Bus

EXIT_INTERRUPTED = 130  # 128 + SIGINT, what shells report for a Ctrl-C


@dataclass(frozen=True)
class RunRequest:
    """One `run`: where, what, and how to show it."""

    playbook: Path
    nats_url: str | None
    prefix: str
    server_url: str | None
    token: str | None
    payload: JsonObject
    timeout_s: float | None
    quiet: bool
    detach: bool  # print the id once the request is stored, and wait for nothing more
    show_output: bool  # -v: also what each task printed
    ui_at: tuple[str, int] | None  # --ui: where the local API and UI listen
    labels: dict[str, str] = field(default_factory=dict)  # --label: to find the execution by


@dataclass
class _Watch:
    """What the run saw while it waited: the execution's id and when it was started."""

    printer: ProgressPrinter
    quiet: bool
    pickup: PickupWatch = field(default_factory=PickupWatch)
    execution_id: str | None = None
    started: list[str] = field(default_factory=list)

    def on_event(self, event: JsonObject) -> None:
        if self.execution_id is None:
            self.execution_id = str(event.get("execution_id"))
        self.pickup(event)
        if not self.quiet:
            self.printer(event)


def parse_payload(payload: str | None, sets: tuple[str, ...]) -> JsonObject:
    """`--payload JSON` with each `--set KEY=VALUE` over it (dots nest)."""
    data: JsonObject = {}
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
            value: JsonValue = jsonutil.loads(raw)
        except ValueError:
            value = raw  # a bare word is a string
        target = data
        parts = key.split(".")
        for depth, part in enumerate(parts[:-1], start=1):
            nested = target.setdefault(part, {})
            if not isinstance(nested, dict):
                fail(EXIT_REJECTED, f"--set {key}: {'.'.join(parts[:depth])} is already set to a "
                                    "value that is not an object")
            target = nested
        target[parts[-1]] = value
    return data


def parse_labels(items: tuple[str, ...]) -> dict[str, str]:
    """Each `--label KEY=VALUE`, checked as the API checks a request's labels."""
    from pydantic import TypeAdapter, ValidationError

    from noetl_stream.messages import Labels

    labels: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            fail(EXIT_REJECTED, f"--label expects KEY=VALUE, got {item!r}")
        labels[key] = value
    try:
        checked: dict[str, str] = TypeAdapter(Labels).validate_python(labels)
    except ValidationError as exc:
        problem = exc.errors()[0]
        named = f" {problem['loc'][0]!r}" if problem["loc"] else ""
        fail(EXIT_REJECTED, f"--label{named}: {problem['msg']}")
    return checked


def load_or_exit(path: Path, strict: bool) -> tuple[str, list[PlaybookFile]]:
    """The playbook's text and every file it names, or exit 2 with every issue on stderr."""
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


def refuse_missing_workload(path: Path, playbook: Playbook, payload: Mapping[str, JsonValue]) -> None:
    """Exit 2 before publishing when a template reads a workload key that neither the playbook's
    workload nor the payload gives (dsl/checks.py): it would render empty and fail later.
    """
    from noetl_stream.dsl.checks import missing_workload_keys

    missing = missing_workload_keys(playbook, set(playbook.workload) | set(payload))
    if missing:  # each read was shown as a warning, with its line, when the playbook was loaded
        fail(EXIT_REJECTED, f"{path}: rejected: templates read workload "
                            f"{', '.join(repr(k) for k in missing)}, which neither the workload nor "
                            "the payload gives (pass --set KEY=VALUE or --payload); nothing was run")


def load_registered(path: str, strict: bool, *, nats_url: str | None, prefix: str,
                    server_url: str | None, token: str | None) -> tuple[str, list[PlaybookFile]]:
    """The text registered under catalog path `path`, validated, or exit 2 saying why. Its
    children by file were registered with it (under its content key), so none is read here.
    """
    from noetl_stream import ids
    from noetl_stream.cli.catalog_view_cmd import fetch_text
    from noetl_stream.cli.remote import RemoteError
    from noetl_stream.dsl import parse_playbook

    try:
        text = run_async(fetch_text(path, None, nats_url=nats_url, prefix=prefix,
                                    server_url=server_url, token=token))
    except RemoteError as exc:
        fail(exc.exit_code, str(exc))
    except InfrastructureError as exc:
        fail(EXIT_INFRA, str(exc))
    if text is None:
        fail(EXIT_REJECTED, f"{path}: no such file, and no playbook is registered under that "
                            "catalog path (`noetl-stream catalog list` shows what is)")
    shown = f"catalog:{path}"
    try:
        result = parse_playbook(text, shown, kinds=installed_kinds(), strict=strict)
    except PlaybookError as exc:
        for issue in exc.issues:
            click.echo(str(issue), err=True)
        fail(EXIT_REJECTED, f"{shown}: rejected; nothing was run")
    for warning in result.warnings:
        click.echo(str(warning), err=True)
    return text, [PlaybookFile(shown, text, ids.playbook_key(text), result.playbook)]


def run_playbook(request: RunRequest, text: str, files: list[PlaybookFile]) -> JsonObject:
    """Run the playbook and wait for its final event; exit with the matching code on errors."""
    from noetl_stream.cli.remote import RemoteError

    if request.nats_url is None and request.server_url is None:  # the embedded stack runs here
        from noetl_stream.observe import tracing

        tracing.setup("noetl-stream")
    watch = _Watch(ProgressPrinter(show_output=request.show_output), request.quiet)
    try:
        return run_async(_run(request, text, files, watch))
    except KeyboardInterrupt:
        interrupted(watch.execution_id, nats_url=request.nats_url, server_url=request.server_url)
    except RemoteError as exc:
        fail(exc.exit_code, str(exc))
    except InfrastructureError as exc:
        fail(EXIT_INFRA, str(exc))
    except TimeoutError:
        still_running(watch.started[0] if watch.started else watch.execution_id,
                      request.timeout_s, nats_url=request.nats_url, server_url=request.server_url)


async def _run(request: RunRequest, text: str, files: list[PlaybookFile],
               watch: _Watch) -> JsonObject:
    if request.server_url is not None:
        from noetl_stream.cli.remote_cmds import run_remote

        return await run_remote(request.server_url, request.token, playbook_text=text,
                                payload=request.payload, labels=request.labels,
                                on_event=watch.on_event,
                                timeout_s=request.timeout_s, detach=request.detach,
                                on_started=watch.started.append)
    from noetl_stream.services import open_stack, run_services
    from noetl_stream.state.catalog import register_files
    from noetl_stream.state.results import ResultStore

    embedded = request.nats_url is None
    on_embedded = None if request.quiet else announce
    async with open_stack(request.nats_url, prefix=request.prefix, on_embedded=on_embedded) as stack:
        services = run_services(stack.bus, local=True) if embedded else contextlib.nullcontext()
        async with services, run_ui(stack.bus, request.ui_at, embedded=embedded) as ui_url:
            if any(f.links for f in files):  # children named by file travel via the catalog
                await register_files(stack.bus.js, files)
            final = await _submit(stack.bus, request, text, watch, ui_url)
            if ui_url is not None:
                click.echo(f"execution {final.get('execution_id')} "
                           f"{final.get('status') or final.get('event_type')}; the UI stays "
                           f"at {ui_url.page('/')} until Ctrl-C", err=True)
                await serve_forever(asyncio.Event())
            # Large results arrive as references to the object store; show their values.
            resolved: JsonObject = await ResultStore(stack.bus.js).resolve(final)
            return resolved


async def _submit(bus: Bus, request: RunRequest, text: str, watch: _Watch,
                  ui_url: LocalUi | None) -> JsonObject:
    """Start the execution on the bus and follow it to its final event."""
    from noetl_stream.services import submit, submit_and_watch

    if request.detach:
        execution_id = await submit(bus, playbook_text=text, playbook_file=str(request.playbook),
                                    payload=request.payload, labels=request.labels)
        return {"execution_id": execution_id, "status": "submitted"}

    def on_started(execution_id: str) -> None:
        watch.started.append(execution_id)
        if ui_url is not None:
            click.echo(f"execution page: {ui_url.page(f'/executions/{execution_id}')}", err=True)

    # Said even with --quiet (on stderr): a run nobody serves must not look hung.
    warner = asyncio.create_task(watch.pickup.warn_later(
        bus, lambda: watch.started[0] if watch.started else None,
        lambda text: click.echo(f"noetl-stream: {text}", err=True)))
    try:
        final: JsonObject = await submit_and_watch(
            bus, playbook_text=text, playbook_file=str(request.playbook), payload=request.payload,
            on_event=watch.on_event, on_started=on_started, timeout_s=request.timeout_s,
            labels=request.labels)
        return final
    finally:
        warner.cancel()


def report_outcome(final: JsonObject, as_json: bool, *, quiet: bool = False) -> NoReturn:
    """Print the outcome (JSON, or the result alone for a completed run) and exit with its code.
    A failed or cancelled run says why in one line on stderr: the progress did, or with
    --quiet this does.
    """
    if final.get("event_type") == "execution.rejected":
        errors = final.get("errors", [])
        for err in errors if isinstance(errors, list) else []:
            click.echo(err, err=True)
        fail(EXIT_REJECTED, "the server rejected the playbook")
    if final.get("status") == "submitted":  # --detach
        if as_json:
            write_stdout(jsonutil.dumps({"execution_id": final["execution_id"], "status": "submitted"}))
        else:
            write_stdout(str(final["execution_id"]).encode())
        sys.exit(EXIT_OK)
    summary = summary_of(final)
    completed = summary["status"] == "completed"
    if as_json:
        write_stdout(jsonutil.dumps(summary))
    elif completed:
        # Progress went to stderr; the result alone goes to stdout, so it pipes into jq. A failed
        # or cancelled execution has no result to pipe: stdout stays empty, the exit code says.
        write_stdout(orjson.dumps(summary.get("result"), option=orjson.OPT_INDENT_2, default=str))
    if not completed and quiet:
        click.echo(f"noetl-stream: execution {summary['execution_id']} {summary['status']}: "
                   f"{failure_reason(summary.get('error'))}", err=True)
    sys.exit(EXIT_OK if completed else EXIT_FAILED)


def failure_reason(error: JsonValue) -> str:
    """The one line that says why an execution did not complete."""
    if isinstance(error, dict):
        text = error.get("message") or error.get("reason") or error.get("kind")
        where = error.get("step")
        if text:
            line = " ".join(str(text).split())
            return f'step "{where}": {line}' if where and str(where) not in line else line
    return "no reason was given" if error is None else " ".join(str(error).split())


@dataclass(frozen=True)
class LocalUi:
    """Where `run --ui` serves, and the token its pages carry (None: users log in)."""

    base: str
    token: str | None

    def page(self, path: str) -> str:
        """The address of `path`; the token rides in the fragment, which browsers never send
        and the page moves to its own storage at once (api/ui/static/common.js).
        """
        return self.base + path + (f"#token={self.token}" if self.token else "")


@contextlib.asynccontextmanager
async def run_ui(bus: Bus, address: tuple[str, int] | None, *,
                 embedded: bool) -> AsyncIterator[LocalUi | None]:
    """The API and UI of `run --ui`, or nothing. On the embedded stack nobody else shares the
    bus, so there are no users to log in: the API accepts one random token made for this run,
    which the printed addresses carry, so neither another local user nor a web page the
    browser visits can use it. On a shared bus (--nats-url) users log in as on `server --http`.
    """
    if address is None:
        yield None
        return
    from noetl_stream.api import serve

    token = secrets.token_urlsafe(32) if embedded else None
    async with serve(bus, host=address[0], port=address[1], auth=not embedded,
                     run_token=token) as url:
        yield LocalUi(url, token)


def still_running(execution_id: str | None, timeout_s: float | None, *, nats_url: str | None,
                  server_url: str | None) -> NoReturn:
    """`--timeout` ended the wait, not the execution: say which one keeps running."""
    if execution_id is None:
        fail(EXIT_STILL_RUNNING, f"no execution was started within {timeout_s:g}s")
    if server_url is None and nats_url is None:  # the embedded stack stops with this command
        fail(EXIT_STILL_RUNNING, f"execution {execution_id} did not end within {timeout_s:g}s; "
                                 "it goes on when a server and a worker run on this home's "
                                 "nats-server (`noetl-stream nats`, then `noetl-stream server` "
                                 "and `worker --nats-url URL`)")
    where = f" --server {server_url}" if server_url else f" --nats-url {nats_url}"
    fail(EXIT_STILL_RUNNING, f"execution {execution_id} did not end within {timeout_s:g}s and "
                             f"keeps running; follow it: noetl-stream watch {execution_id}{where}")


def interrupted(execution_id: str | None, *, nats_url: str | None,
                 server_url: str | None) -> NoReturn:
    """Ctrl-C stops waiting, not the execution: say so, and how to follow or stop it."""
    if execution_id is None:
        fail(EXIT_INTERRUPTED, "interrupted before the execution was started")
    where = f" --server {server_url}" if server_url else f" --nats-url {nats_url or 'URL'}"
    lines = [f"interrupted: execution {execution_id} was not cancelled and keeps running"]
    if server_url is None and nats_url is None:
        lines.append("  (on the embedded nats-server: it goes on when a server and a worker run "
                     "there, e.g. `noetl-stream nats` and `noetl-stream server/worker --nats-url URL`)")
    lines.append(f"  follow it: noetl-stream watch {execution_id}{where}")
    lines.append(f"  stop it:   noetl-stream cancel {execution_id}{where}")
    click.echo("noetl-stream: " + "\n".join(lines), err=True)
    sys.exit(EXIT_INTERRUPTED)
