"""What `run`, `watch`, `status`, `cancel`, `signal` and `register` do under --server: the same
requests, answers and exit codes as over NATS, sent to the HTTP API through cli/remote.py.

Over HTTP a command sees what the API shows: events and results as stored, so a large result
stays a reference to the object store (NATS readers resolve it), and `status` reports the
execution's summary rather than the router's explanation of what it waits for.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from collections.abc import Callable, Coroutine
from datetime import datetime
from pathlib import Path
from typing import Any, NoReturn, TypeVar
from urllib.parse import quote

import click

from noetl_stream import jsonutil
from noetl_stream.cli.common import EXIT_FAILED, EXIT_INFRA, EXIT_OK, EXIT_REJECTED, fail, run_async
from noetl_stream.cli.remote import END_EVENTS, RESTARTED, ApiClient, RemoteError, open_client
from noetl_stream.dsl.composition import ComposedResult, PlaybookFile
from noetl_stream.errors import InfrastructureError

T = TypeVar("T")
START_ATTEMPTS = 3


def call(coro: Coroutine[Any, Any, T]) -> T:
    """Run a remote command's coroutine; an error answer or an unreachable server ends the
    command with its one-line message and exit code.
    """
    try:
        return run_async(coro)
    except RemoteError as exc:
        fail(exc.exit_code, str(exc))
    except InfrastructureError as exc:
        fail(EXIT_INFRA, str(exc))


def refuse_file_children(path: Path, files: list[PlaybookFile]) -> None:
    """Children named by file live on this machine; the API reads only the text it is sent and
    cannot record which file a name meant, so such a playbook is refused before anything is sent.
    """
    named = sorted({name for f in files for name in f.links})
    if named:
        fail(EXIT_REJECTED, f"{path} names child playbooks by file ({', '.join(named)}), which a "
             "remote server cannot read: register each child with `noetl-stream register "
             "--server` and name it by its metadata.path, or run with --nats-url")


def _rejected(execution_id: str | None, reasons: list[str]) -> dict[str, Any]:
    """The refusal as the terminal event the NATS path sees, so `run` reports both alike."""
    return {"event_type": "execution.rejected", "execution_id": execution_id,
            "status": "rejected", "errors": reasons}


async def _follow(client: ApiClient, execution_id: str, on_event: Callable[[dict[str, Any]], None],
                  *, wait_for_start: bool = False) -> dict[str, Any]:
    """Deliver every event to `on_event` until the server ends the stream, and return the
    terminal event (the last one: a restart reopens an ended execution).
    """
    end: dict[str, Any] | None = None
    async for frame in client.events(execution_id, wait_for_start=wait_for_start):
        event = frame.json()
        if not isinstance(event, dict):
            continue
        on_event(event)
        if event.get("event_type") == RESTARTED:
            end = None
        elif event.get("event_type") in END_EVENTS:
            end = event
    if end is not None:
        return end
    # The stream ended without a terminal event: it had ended before we joined and its events
    # are gone from the stream. The state still says how it ended.
    detail: dict[str, Any] = await client.request(
        "GET", f"/api/executions/{quote(execution_id, safe='')}")
    return {"event_type": f"execution.{detail.get('status')}", **detail}


async def run_remote(server_url: str, token: str | None, *, playbook_text: str,
                     payload: dict[str, Any], on_event: Callable[[dict[str, Any]], None],
                     timeout_s: float | None, detach: bool = False,
                     labels: dict[str, str] | None = None,
                     on_started: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Start an inline playbook and follow it to the end; the terminal event, as over NATS.
    With `detach`, return once the server has accepted it.
    """
    async with open_client(server_url, token) as client:
        try:
            accepted = await _start(client, {"playbook": playbook_text, "payload": payload,
                                             "labels": labels or {}})
        except RemoteError as exc:
            if exc.status == 422 and exc.code in ("rejected", "invalid_playbook"):
                details = exc.details if isinstance(exc.details, dict) else {}
                return _rejected(details.get("execution_id"), exc.reasons() or [exc.message])
            raise
        execution_id = str(accepted["execution_id"])
        if detach:
            return {"execution_id": execution_id, "status": "submitted"}
        if on_started is not None:
            on_started(execution_id)
        # "submitted": stored, but no server answered in time; it starts when one does.
        pending = accepted.get("status") == "submitted"
        async with asyncio.timeout(timeout_s):
            return await _follow(client, execution_id, on_event, wait_for_start=pending)


async def _start(client: ApiClient, body: dict[str, Any]) -> Any:
    """POST the start request; a dropped connection is retried under the same Idempotency-Key,
    so the server starts one execution however many of the attempts reached it.
    """
    headers = {"Idempotency-Key": f"cli-{uuid.uuid4().hex}"}
    for attempt in range(START_ATTEMPTS):
        try:
            return await client.request("POST", "/api/executions", json=body, headers=headers)
        except InfrastructureError:
            if attempt == START_ATTEMPTS - 1:
                raise
            await asyncio.sleep(1.0)
    raise InfrastructureError("no attempt to start the execution was made")


async def watch_remote(server_url: str, token: str | None, execution_id: str,
                       on_event: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    async with open_client(server_url, token) as client:
        return await _follow(client, execution_id, on_event)


def _when(value: Any) -> str:
    if not isinstance(value, str):
        return "-"
    return datetime.fromisoformat(value).strftime("%Y-%m-%d %H:%M:%SZ")


def detail_lines(detail: dict[str, Any]) -> list[str]:
    """GET /api/executions/{id} as short lines for a terminal."""
    name = detail.get("playbook_path") or detail.get("playbook_name")
    lines = [f"execution {detail['execution_id']}: {detail['status']}" + (f" ({name})" if name else ""),
             f"  started {_when(detail.get('started_at'))}"]
    if detail.get("parent_execution_id"):
        lines.append(f"  child of {detail['parent_execution_id']}")
    for reason in detail.get("errors") or []:
        lines.append(f"  rejected: {reason}")
    for step, record in (detail.get("steps") or {}).items():
        runs = record.get("runs")
        lines.append(f"  step {step}: {record.get('status')}" + (f" ({runs} runs)" if runs else ""))
    if detail["status"] == "running":
        return lines
    error = detail.get("error")
    if error:
        lines.append(f"  error: {error.get('message', error) if isinstance(error, dict) else error}")
    elif detail["status"] != "rejected":
        lines.append(f"  result: {jsonutil.dumps_str(detail.get('result'))}")
    return lines


def status_remote(server_url: str, token: str | None, execution_id: str, as_json: bool) -> None:
    async def go() -> dict[str, Any]:
        async with open_client(server_url, token) as client:
            detail: dict[str, Any] = await client.request(
                "GET", f"/api/executions/{quote(execution_id, safe='')}")
            return detail

    detail = call(go())
    if as_json:
        click.echo(jsonutil.dumps_str(detail))
        return
    for line in detail_lines(detail):
        click.echo(line)


def cancel_remote(server_url: str, token: str | None, execution_id: str, reason: str | None,
                  wait_end: bool, timeout_s: float) -> NoReturn:
    """POST .../cancel; with `wait_end`, follow the events until the execution ends."""
    async def go() -> dict[str, Any] | None:
        async with open_client(server_url, token) as client:
            await client.request("POST", f"/api/executions/{quote(execution_id, safe='')}/cancel",
                                 json={"reason": reason} if reason else None)
            click.echo(f"cancel of {execution_id} requested", err=True)
            if not wait_end:
                return None
            async with asyncio.timeout(timeout_s):
                return await _follow(client, execution_id, lambda event: None)

    try:
        final = call(go())
    except TimeoutError:
        fail(EXIT_INFRA, f"{execution_id} did not end within {timeout_s:g}s")
    if final is None:
        sys.exit(EXIT_OK)
    status = str(final.get("status") or final.get("event_type", "").removeprefix("execution."))
    click.echo(f"{execution_id} {status}")
    sys.exit(EXIT_OK if status == "cancelled" else EXIT_FAILED)


async def restart_remote(server_url: str, token: str | None, execution_id: str, *,
                         from_step: str | None, workload: dict[str, Any], detach: bool,
                         timeout_s: float | None, latest: bool = False) -> dict[str, Any]:
    """POST .../restart; unless `detach`, follow the events to the end that follows it (the
    server's event stream ends at an execution's latest end, a restart's included).
    """
    async with open_client(server_url, token) as client:
        asked: dict[str, Any] = await client.request(
            "POST", f"/api/executions/{quote(execution_id, safe='')}/restart",
            json={"from_step": from_step, "workload": workload, "latest": latest})
        if detach:
            return {"execution_id": execution_id, "restart": asked.get("restart")}
        async with asyncio.timeout(timeout_s):
            return await _follow(client, execution_id, lambda event: None)


async def replay_remote(server_url: str, token: str | None, execution_id: str, *,
                        from_step: str | None, workload: dict[str, Any], detach: bool,
                        timeout_s: float | None) -> dict[str, Any]:
    """POST .../replay; unless `detach`, follow the new execution's events to its end."""
    async with open_client(server_url, token) as client:
        asked: dict[str, Any] = await client.request(
            "POST", f"/api/executions/{quote(execution_id, safe='')}/replay",
            json={"from_step": from_step, "workload": workload})
        if detach:
            return asked
        async with asyncio.timeout(timeout_s):
            return await _follow(client, str(asked["execution_id"]), lambda event: None)


async def signal_remote(server_url: str, token: str | None, execution_id: str, name: str,
                        data: Any, msg_id: str | None, force: bool = False) -> int:
    """POST .../signals/{name} with the data as body; the events stream sequence it was stored at.
    The server refuses (409) a signal no waiting step listens for unless `force`.
    """
    # The id becomes the Idempotency-Key: the server stores a repeated signal once. Data `null`
    # goes as no body, which the server reads as null.
    headers = {"Idempotency-Key": msg_id} if msg_id else None
    path = f"/api/executions/{quote(execution_id, safe='')}/signals/{quote(name, safe='')}"
    if force:
        path += "?force=true"
    async with open_client(server_url, token) as client:
        answer = await client.request("POST", path, json=data, headers=headers)
    return int(answer["seq"])


async def register_remote(server_url: str, token: str | None, loaded: list[tuple[Path, ComposedResult]],
                          strict: bool) -> list[str]:
    """POST /api/catalog per playbook; the lines `register` prints. Warnings go to stderr."""
    lines = []
    async with open_client(server_url, token) as client:
        for path, result in loaded:
            answer = await client.request("POST", "/api/catalog",
                                          json={"content": result.files[0].text, "strict": strict})
            for warning in answer.get("warnings", []):
                click.echo(f"{path}: {warning}", err=True)
            version = f" version {answer['version']}" if answer.get("version") else ""
            lines.append(f"{path}: registered {answer['path']}{version} ({answer['playbook_id']}, "
                         "0 child file(s))")
    return lines
