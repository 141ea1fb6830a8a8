"""Triggers over HTTP: the same operations as `noetl-stream trigger ...` (server/trigger_ops.py)
on the same KV bucket and streams, under the API's roles: reading needs `read`, apply and delete
`catalog.write`, pause and resume `control`, fire and backfill `run`.
"""

from __future__ import annotations

from collections.abc import Awaitable
from datetime import UTC, datetime
from typing import TypeVar

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field

from noetl_stream import ids
from noetl_stream.api.context import api_context
from noetl_stream.api.endpoints import Endpoint, json_response, read_body, read_query
from noetl_stream.api.errors import ApiError, not_found
from noetl_stream.api.request_guard import YAML_TYPES
from noetl_stream.errors import Issue, PlaybookError, YamlSyntaxError
from noetl_stream.jsonutil import JsonObject
from noetl_stream.server import trigger_ops
from noetl_stream.server.trigger_fire_outcome import fire_and_wait
from noetl_stream.server.trigger_history import MAX_PAGE, history
from noetl_stream.state.triggers import TriggerState
from noetl_stream.triggers.cron import ScheduleError
from noetl_stream.triggers.subscription_map import document_trigger

T = TypeVar("T")

REQUEST_FILE = "<request>"


class TriggerApply(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    content: str = Field(max_length=1024 * 1024, description="The trigger document's YAML text "
                         "(kind: Trigger, or a Subscription whose form maps onto one)")


class TriggerBackfill(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)
    start: datetime = Field(alias="from", description="First instant (RFC 3339; UTC without "
                            "an offset)")
    end: datetime = Field(alias="to", description="Last instant, included")


class HistoryQuery(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    after_seq: int = Field(0, ge=0, description="Events after this stream sequence")
    limit: int = Field(100, ge=1, le=MAX_PAGE)
    newest: bool = Field(False, description="The last `limit` events (after after_seq) instead "
                         "of the first")


class TriggerSummary(BaseModel):
    model_config = ConfigDict(frozen=True)
    name: str
    state: str
    playbook: str
    source: str
    next_fire: str | None
    last_execution: JsonObject | None


class TriggerList(BaseModel):
    model_config = ConfigDict(frozen=True)
    items: list[TriggerSummary]


class TriggerDetail(TriggerSummary):
    revision: int
    applied_at: str
    document: JsonObject
    next_fires: list[str] = Field(description="The next fire times of an active cron schedule")


class TriggerHistory(BaseModel):
    model_config = ConfigDict(frozen=True)
    items: list[JsonObject] = Field(description="Trigger events, oldest first, with `seq`")
    last_seq: int = Field(description="The next page's after_seq")


class TriggerChanged(BaseModel):
    model_config = ConfigDict(frozen=True)
    name: str
    result: str = Field(description="created, updated, paused, resumed, unchanged, deleted, "
                        "fired or backfilled")
    nominal_times: list[str] = Field(default_factory=list, description="fire and backfill")
    warnings: list[str] = Field(default_factory=list)


class FireQuery(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    wait: float = Field(10.0, ge=0, le=60, description="Seconds to wait for a server to start "
                        "the execution or refuse the fire (0: answer 202 at once)")


class TriggerFired(TriggerChanged):
    result: str = Field(description="started (201): a server started the execution; fired "
                        "(202): none did within `wait`, it starts once a server reads the fire")
    execution_id: str = Field(description="The execution this fire starts: its id is derived "
                              "from the trigger and the nominal time")


def trigger_name(request: web.Request) -> str:
    """The `{name}` of the path; 404 for what no trigger can be named (a KV key needs one)."""
    name = request.match_info["name"]
    if not ids.is_subject_token(name):
        raise not_found(f'trigger "{name}"')
    return name


async def _call(action: Awaitable[T]) -> T:
    """Map the operations' refusals to HTTP."""
    try:
        return await action
    except trigger_ops.TriggerNotFound as exc:
        raise not_found(str(exc).split(" (")[0]) from None
    except (trigger_ops.ScheduleRefused, ScheduleError) as exc:
        raise ApiError(422, str(exc)) from None


async def list_triggers(request: web.Request) -> web.StreamResponse:
    rows = await trigger_ops.listing(api_context(request).bus)
    return json_response(TriggerList(items=[TriggerSummary(**r) for r in rows]))


async def get_trigger(request: web.Request) -> web.StreamResponse:
    bus = api_context(request).bus
    return json_response(TriggerDetail(**await _call(trigger_ops.detail(
        bus, trigger_name(request)))))


async def trigger_history(request: web.Request) -> web.StreamResponse:
    bus, name = api_context(request).bus, trigger_name(request)
    query = read_query(request, HistoryQuery)
    items, last = await history(bus, name, after_seq=query.after_seq, limit=query.limit,
                                newest=query.newest)
    return json_response(TriggerHistory(items=items, last_seq=last))


async def apply_trigger(request: web.Request) -> web.StreamResponse:
    bus = api_context(request).bus
    if request.content_type in YAML_TYPES:
        text = await request.text()
    else:
        text = (await read_body(request, TriggerApply)).content
    try:
        trigger, warnings = document_trigger(text, REQUEST_FILE)
    except YamlSyntaxError as exc:
        raise PlaybookError([Issue(REQUEST_FILE, exc.line, str(exc))]) from None
    record, new = await _call(trigger_ops.apply(bus, trigger, text))
    return json_response(TriggerChanged(name=record.trigger.name,
                                        result="created" if new else "updated",
                                        warnings=warnings), 201 if new else 200)


async def _set_state(request: web.Request, state: TriggerState) -> web.Response:
    bus, name = api_context(request).bus, trigger_name(request)
    changed = await _call(trigger_ops.set_state(bus, name, state))
    result = ("paused" if state == "paused" else "resumed") if changed else "unchanged"
    return json_response(TriggerChanged(name=name, result=result))


async def pause_trigger(request: web.Request) -> web.StreamResponse:
    return await _set_state(request, "paused")


async def resume_trigger(request: web.Request) -> web.StreamResponse:
    return await _set_state(request, "active")


async def fire_trigger(request: web.Request) -> web.StreamResponse:
    """Fire once and wait, up to `wait`, for what the fire came to, as `trigger fire` does: a
    202 alone would read as success for a fire that starts nothing.
    """
    bus, name = api_context(request).bus, trigger_name(request)
    wait_s = read_query(request, FireQuery).wait
    outcome = await _call(fire_and_wait(bus, name, wait_s))
    if outcome.started is False:
        raise ApiError(409, f"trigger {name} fired for {outcome.nominal_time}, but no execution "
                            f"started: {outcome.reason}", code="not_started",
                       details={"nominal_time": outcome.nominal_time, "reason": outcome.reason})
    return json_response(TriggerFired(name=name, result="started" if outcome.started else "fired",
                                      nominal_times=[outcome.nominal_time],
                                      execution_id=outcome.execution_id),
                         201 if outcome.started else 202)


def _utc(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


async def backfill_trigger(request: web.Request) -> web.StreamResponse:
    bus, name = api_context(request).bus, trigger_name(request)
    body = await read_body(request, TriggerBackfill)
    times = await _call(trigger_ops.backfill(bus, name, _utc(body.start), _utc(body.end)))
    return json_response(TriggerChanged(name=name, result="backfilled", nominal_times=times), 202)


async def delete_trigger(request: web.Request) -> web.StreamResponse:
    bus, name = api_context(request).bus, trigger_name(request)
    await _call(trigger_ops.delete(bus, name))
    return json_response(TriggerChanged(name=name, result="deleted"))


_ONE = "/api/triggers/{name}"
ENDPOINTS = [
    Endpoint("GET", "/api/triggers", list_triggers, "Every trigger: state, source, next fire "
             "time, last execution and its status", "read", "triggers", response=TriggerList),
    Endpoint("POST", "/api/triggers", apply_trigger, "Create or change a trigger from its "
             "document (a paused one stays paused)", "catalog.write", "triggers",
             body=TriggerApply, response=TriggerChanged, status=201, errors=(404, 422),
             raw_body="text/yaml"),
    Endpoint("GET", _ONE, get_trigger, "One trigger: its document, state, next fire times and "
             "last execution", "read", "triggers", response=TriggerDetail, errors=(404,)),
    Endpoint("GET", _ONE + "/history", trigger_history, "A trigger's events, oldest first: "
             "changes, fires, failures", "read", "triggers", query=HistoryQuery,
             response=TriggerHistory, errors=(404, 422)),
    Endpoint("POST", _ONE + "/pause", pause_trigger, "Stop a trigger firing until resumed",
             "control", "triggers", body_required=False, response=TriggerChanged,
             errors=(404,)),
    Endpoint("POST", _ONE + "/resume", resume_trigger, "Let a paused trigger fire again",
             "control", "triggers", body_required=False, response=TriggerChanged,
             errors=(404,)),
    Endpoint("POST", _ONE + "/fire", fire_trigger, "Fire a trigger once, now (a paused one "
             "too), and wait up to `wait` seconds for its execution: 201 started, 202 not yet, "
             "409 refused (the reason)", "run", "triggers", body_required=False,
             query=FireQuery, response=TriggerFired, status=201, errors=(404, 409, 422)),
    Endpoint("POST", _ONE + "/backfill", backfill_trigger, "One execution per fire time of the "
             "trigger's schedule in [from, to]", "run", "triggers", body=TriggerBackfill,
             response=TriggerChanged, status=202, errors=(404, 422)),
    Endpoint("DELETE", _ONE, delete_trigger, "Remove a trigger and its schedule or consumer",
             "catalog.write", "triggers", response=TriggerChanged, errors=(404,)),
]
