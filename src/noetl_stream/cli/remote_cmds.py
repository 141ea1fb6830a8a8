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
from collections.abc import Callable, Coroutine, Mapping
from datetime import datetime
from pathlib import Path
from typing import NoReturn, TypeVar
from urllib.parse import quote

import click

from noetl_stream import jsonutil
from noetl_stream.api.models import (
    CatalogRegistered,
    ExecutionAccepted,
    ExecutionDetail,
    ReplayAccepted,
    RestartAccepted,
    SignalSent,
)
from noetl_stream.cli.common import EXIT_FAILED, EXIT_INFRA, EXIT_OK, EXIT_REJECTED, fail, run_async
from noetl_stream.cli.remote import (
    END_EVENTS,
    RESTARTED,
    ApiClient,
    RemoteError,
    answer_as,
    open_client,
)
from noetl_stream.dsl.composition import ComposedResult, PlaybookFile
from noetl_stream.errors import InfrastructureError
from noetl_stream.jsonutil import JsonObject, JsonValue

T = TypeVar("T")
START_ATTEMPTS = 3


def call(coro: Coroutine[object, object, T]) -> T:
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


def _rejected(execution_id: JsonValue, reasons: list[str]) -> JsonObject:
    """The refusal as the terminal event the NATS path sees, so `run` reports both alike."""
    return {"event_type": "execution.rejected", "execution_id": execution_id,
            "status": "rejected", "errors": [*reasons]}


async def _follow(client: ApiClient, execution_id: str, on_event: Callable[[JsonObject], None],
                  *, wait_for_start: bool = False) -> JsonObject:
    """Deliver every event to `on_event` until the server ends the stream, and return the
    terminal event (the last one: a restart reopens an ended execution).
    """
    end: JsonObject | None = None
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
    detail = await client.answer(ExecutionDetail, "GET",
                                 f"/api/executions/{quote(execution_id, safe='')}")
    return {"event_type": f"execution.{detail.status}", **detail.model_dump(mode="json")}


async def run_remote(server_url: str, token: str | None, *, playbook_text: str,
                     payload: JsonObject, on_event: Callable[[JsonObject], None],
                     timeout_s: float | None, detach: bool = False,
                     labels: dict[str, str] | None = None,
                     on_started: Callable[[str], None] | None = None) -> JsonObject:
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
        execution_id = accepted.execution_id
        if detach:
            return {"execution_id": execution_id, "status": "submitted"}
        if on_started is not None:
            on_started(execution_id)
        # "submitted": stored, but no server answered in time; it starts when one does.
        pending = accepted.status == "submitted"
        async with asyncio.timeout(timeout_s):
            return await _follow(client, execution_id, on_event, wait_for_start=pending)


async def _start(client: ApiClient, body: Mapping[str, object]) -> ExecutionAccepted:
    """POST the start request; a dropped connection is retried under the same Idempotency-Key,
    so the server starts one execution however many of the attempts reached it.
    """
    headers = {"Idempotency-Key": f"cli-{uuid.uuid4().hex}"}
    for attempt in range(START_ATTEMPTS):
        try:
            return await client.answer(ExecutionAccepted, "POST", "/api/executions", json=body,
                                       headers=headers)
        except InfrastructureError:
            if attempt == START_ATTEMPTS - 1:
                raise
            await asyncio.sleep(1.0)
    raise InfrastructureError("no attempt to start the execution was made")


async def watch_remote(server_url: str, token: str | None, execution_id: str,
                       on_event: Callable[[JsonObject], None]) -> JsonObject:
    async with open_client(server_url, token) as client:
        return await _follow(client, execution_id, on_event)


def _when(value: datetime | None) -> str:
    if value is None:
        return "-"
    return value.strftime("%Y-%m-%d %H:%M:%SZ")


def detail_lines(detail: ExecutionDetail) -> list[str]:
    """GET /api/executions/{id} as short lines for a terminal."""
    name = detail.playbook_path or detail.playbook_name
    lines = [f"execution {detail.execution_id}: {detail.status}" + (f" ({name})" if name else ""),
             f"  started {_when(detail.started_at)}"]
    if detail.parent_execution_id:
        lines.append(f"  child of {detail.parent_execution_id}")
    for reason in detail.errors:
        lines.append(f"  rejected: {reason}")
    for step, record in detail.steps.items():
        if not isinstance(record, dict):
            continue
        runs = record.get("runs")
        lines.append(f"  step {step}: {record.get('status')}" + (f" ({runs} runs)" if runs else ""))
    if detail.status == "running":
        return lines
    error = detail.error
    if error:
        lines.append(f"  error: {error.get('message', error)}")
    elif detail.status != "rejected":
        lines.append(f"  result: {jsonutil.dumps_str(detail.result)}")
    return lines


def status_remote(server_url: str, token: str | None, execution_id: str, as_json: bool) -> None:
    path = f"/api/executions/{quote(execution_id, safe='')}"

    async def go() -> tuple[JsonValue, ExecutionDetail]:
        async with open_client(server_url, token) as client:
            answer = await client.request("GET", path)
            return answer, answer_as(ExecutionDetail, answer, f"GET {path}")

    answer, detail = call(go())
    if as_json:  # the server's answer as it came
        click.echo(jsonutil.dumps_str(answer))
        return
    for line in detail_lines(detail):
        click.echo(line)


def cancel_remote(server_url: str, token: str | None, execution_id: str, reason: str | None,
                  wait_end: bool, timeout_s: float) -> NoReturn:
    """POST .../cancel; with `wait_end`, follow the events until the execution ends."""
    async def go() -> JsonObject | None:
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
    event_type = final.get("event_type", "")
    status = str(final.get("status")
                 or (event_type.removeprefix("execution.") if isinstance(event_type, str) else ""))
    click.echo(f"{execution_id} {status}")
    sys.exit(EXIT_OK if status == "cancelled" else EXIT_FAILED)


async def restart_remote(server_url: str, token: str | None, execution_id: str, *,
                         from_step: str | None, workload: JsonObject, detach: bool,
                         timeout_s: float | None, latest: bool = False) -> JsonObject:
    """POST .../restart; unless `detach`, follow the events to the end that follows it (the
    server's event stream ends at an execution's latest end, a restart's included).
    """
    async with open_client(server_url, token) as client:
        asked = await client.answer(
            RestartAccepted, "POST", f"/api/executions/{quote(execution_id, safe='')}/restart",
            json={"from_step": from_step, "workload": workload, "latest": latest})
        if detach:
            return {"execution_id": execution_id, "restart": asked.restart}
        async with asyncio.timeout(timeout_s):
            return await _follow(client, execution_id, lambda event: None)


async def replay_remote(server_url: str, token: str | None, execution_id: str, *,
                        from_step: str | None, workload: JsonObject, detach: bool,
                        timeout_s: float | None) -> JsonObject:
    """POST .../replay; unless `detach`, follow the new execution's events to its end."""
    async with open_client(server_url, token) as client:
        asked = await client.answer(
            ReplayAccepted, "POST", f"/api/executions/{quote(execution_id, safe='')}/replay",
            json={"from_step": from_step, "workload": workload})
        if detach:  # printed as the server answered it
            return asked.model_dump(mode="json")
        async with asyncio.timeout(timeout_s):
            return await _follow(client, asked.execution_id, lambda event: None)


async def signal_remote(server_url: str, token: str | None, execution_id: str, name: str,
                        data: JsonValue, msg_id: str | None, force: bool = False) -> int:
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
        answer = await client.answer(SignalSent, "POST", path, json=data, headers=headers)
    return answer.seq


async def register_remote(server_url: str, token: str | None, loaded: list[tuple[Path, ComposedResult]],
                          strict: bool) -> list[str]:
    """POST /api/catalog per playbook; the lines `register` prints. Warnings go to stderr."""
    lines = []
    async with open_client(server_url, token) as client:
        for path, result in loaded:
            answer = await client.answer(CatalogRegistered, "POST", "/api/catalog",
                                         json={"content": result.files[0].text, "strict": strict})
            for warning in answer.warnings:
                click.echo(f"{path}: {warning}", err=True)
            version = f" version {answer.version}" if answer.version else ""
            lines.append(f"{path}: registered {answer.path}{version} ({answer.playbook_id}, "
                         "0 child file(s))")
    return lines
