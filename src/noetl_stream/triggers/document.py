"""`kind: Trigger` documents: YAML (with line numbers) to a typed model, every problem reported at
once with file, line and field, as playbooks are.

    apiVersion: noetl.io/v2
    kind: Trigger
    metadata: {name: nightly}
    spec:
      playbook: etl/nightly          # catalog path
      version: "3"                   # optional; latest when absent
      payload: {day: "{{ trigger.nominal_time[:10] }}"}
      schedule: {cron: "0 2 * * *", timezone: Europe/Amsterdam}   # or {every: 5m}
      # or: on: {subject: "orders.*.created", when: "{{ message.data.total > 100 }}"}
      # or: on: {event: execution.failed, playbook: "etl/*"}
      # or: webhook: {secret: hook-secret}
      catch_up: last                 # schedules: none | last | all
      concurrency: {limit: 1, on_limit: skip}   # optional; for a playbook without its own
      labels: {team: data}           # optional; on every execution it starts
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from noetl_stream import ids
from noetl_stream.dsl.execution_limits import Concurrency, concurrency_problems
from noetl_stream.dsl.source import line_of, load_yaml, plain, suggest
from noetl_stream.dsl.templating import syntax_problem, template_strings
from noetl_stream.errors import Issue, PlaybookError
from noetl_stream.jsonutil import JsonObject, JsonValue
from noetl_stream.messages import Labels
from noetl_stream.triggers.cron import ScheduleError, every_seconds, six_fields, zone
from noetl_stream.triggers.kind import KIND

API_VERSION = "noetl.io/v2"
_SPEC_KEYS = ("playbook", "version", "payload", "schedule", "on", "webhook", "catch_up",
              "payload_from", "concurrency", "labels")
_PAYLOAD_FROM = re.compile(r"(trigger|message|webhook|event)(\.[A-Za-z_][A-Za-z0-9_]*)+")
_SOURCES = ("schedule", "on", "webhook")
_ON_KEYS = ("subject", "event", "playbook", "when")
CatchUp = Literal["none", "last", "all"]


class Schedule(BaseModel):
    """Exactly one of `cron` (5 or 6 fields, in `timezone`, UTC by default) and `every`."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    cron: str | None = None
    timezone: str | None = None
    every: str | None = None

    def nats_schedule(self) -> str:
        """The `Nats-Schedule` header value nats-server fires on."""
        if self.every is not None:
            return f"@every {every_seconds(self.every)}s"
        assert self.cron is not None
        return six_fields(self.cron)


class OnMessage(BaseModel):
    """Every message on `subject` (wildcards allowed), or every event of type `event` the
    runtime publishes (of a playbook whose catalog path matches `playbook`), for which `when`
    holds.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    subject: str | None = None
    event: str | None = None
    playbook: str | None = None  # a glob over catalog paths (`etl/*`), events only
    when: str | None = None


class Webhook(BaseModel):
    """`POST /api/hooks/<name>` signed with HMAC-SHA256 under the credential `secret`."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    secret: str
    header: str | None = None  # the signature's header; X-Noetl-Signature when absent


class TriggerSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    playbook: str
    version: str | None = None
    payload: JsonObject = {}
    schedule: Schedule | None = None
    on: OnMessage | None = None
    webhook: Webhook | None = None
    catch_up: CatchUp = "last"
    # A mapping in the trigger's context (`message.data`, `webhook.body`, `event.data`) the
    # rendered payload is merged over; a webhook's body is by default.
    payload_from: str | None = None
    # The executions it starts run under this limit when their playbook declares none
    # (dsl/execution_limits.py; docs/triggers.md "Concurrency and deadlines").
    concurrency: Concurrency | None = None
    labels: Labels = {}  # put on every execution it starts, to find them by

    @property
    def source(self) -> Literal["schedule", "on", "webhook"]:
        if self.schedule is not None:
            return "schedule"
        return "on" if self.on is not None else "webhook"


class Trigger(BaseModel):
    """A trigger as it crosses process boundaries (KV `noetl_triggers`, trigger events)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    spec: TriggerSpec


class _Collector:
    def __init__(self, file: str) -> None:
        self.file = file
        self.issues: list[Issue] = []

    def add(self, node: JsonValue, key: str | None, message: str, field: str | None = None) -> None:
        self.issues.append(Issue(self.file, line_of(node, key) or line_of(node), message,
                                 field=field))


def parse_trigger(text: str, file: str = "<trigger>") -> Trigger:
    """The trigger a document describes; PlaybookError with every issue found otherwise."""
    doc = load_yaml(text)
    out = _Collector(file)
    if not isinstance(doc, dict):
        raise PlaybookError([Issue(file, 1, "a trigger document is a mapping")])
    _check_header(doc, out)
    name = _name(doc, out)
    spec = doc.get("spec")
    if not isinstance(spec, dict):
        out.add(doc, "spec" if "spec" in doc else None, "spec: a mapping is required", "spec")
        raise PlaybookError(out.issues)
    _check_spec(spec, out)
    if out.issues:
        raise PlaybookError(out.issues)
    return Trigger(name=name, spec=TriggerSpec.model_validate(plain(spec)))


def _check_header(doc: JsonObject, out: _Collector) -> None:
    if doc.get("apiVersion") != API_VERSION:
        out.add(doc, "apiVersion", f"apiVersion must be {API_VERSION}", "apiVersion")
    if doc.get("kind") != KIND:
        out.add(doc, "kind", f"kind must be {KIND}, not {doc.get('kind')!r}", "kind")
    for key in doc:
        if key not in ("apiVersion", "kind", "metadata", "spec"):
            out.add(doc, key, f"unknown key {key!r}"
                    f"{suggest(str(key), ('apiVersion', 'kind', 'metadata', 'spec'))}", str(key))


def _name(doc: JsonObject, out: _Collector) -> str:
    meta = doc.get("metadata")
    name = meta.get("name") if isinstance(meta, dict) else None
    if not isinstance(name, str) or not ids.is_subject_token(name):
        out.add(meta if isinstance(meta, dict) else doc, "name" if isinstance(meta, dict) else
                "metadata", "metadata.name: 1 to 128 letters, digits, '-' or '_' is required",
                "metadata.name")
        return ""
    return name


def _check_spec(spec: JsonObject, out: _Collector) -> None:
    for key in spec:
        if key not in _SPEC_KEYS:
            out.add(spec, key, f"unknown key {key!r}{suggest(str(key), _SPEC_KEYS)}",
                    f"spec.{key}")
    playbook = spec.get("playbook")
    if not isinstance(playbook, str) or not playbook.strip():
        out.add(spec, "playbook" if "playbook" in spec else None,
                "the catalog path of the playbook to start is required", "spec.playbook")
    if "version" in spec and not isinstance(spec["version"], (str, int)):
        out.add(spec, "version", "a version is a string or a number", "spec.version")
    elif isinstance(version := spec.get("version"), int):
        spec["version"] = str(version)
    payload = spec.get("payload", {})
    if not isinstance(payload, dict):
        out.add(spec, "payload", "payload must be a mapping", "spec.payload")
    else:
        _check_templates(spec, "payload", payload, out)
    if "concurrency" in spec:
        for line, fld, message in concurrency_problems(spec["concurrency"], spec,
                                                       "spec.concurrency"):
            out.issues.append(Issue(out.file, line or line_of(spec), message, field=fld))
    _check_labels(spec, out)
    _check_source(spec, out)


def _check_labels(spec: JsonObject, out: _Collector) -> None:
    try:
        TypeAdapter(Labels).validate_python(spec.get("labels", {}))
    except ValidationError as exc:
        problem = exc.errors()[0]
        where = "".join(f"[{p!r}]" for p in problem["loc"][:1])
        out.add(spec, "labels", f"labels{where}: {problem['msg']}", "spec.labels")


def _check_source(spec: JsonObject, out: _Collector) -> None:
    sources = [s for s in _SOURCES if s in spec]
    if len(sources) != 1:
        out.add(spec, sources[1] if len(sources) > 1 else None,
                "exactly one source is required: schedule, on or webhook", "spec")
    elif sources[0] == "schedule":
        _check_schedule(spec["schedule"], spec, out)
    elif sources[0] == "on":
        _check_on(spec["on"], spec, out)
    else:
        _check_webhook(spec["webhook"], spec, out)
    payload_from = spec.get("payload_from")
    if "payload_from" in spec and not (isinstance(payload_from, str)
                                       and _PAYLOAD_FROM.fullmatch(payload_from)):
        out.add(spec, "payload_from", "payload_from is a path in the trigger's context, e.g. "
                "message.data", "spec.payload_from")
    if "catch_up" in spec:
        if spec["catch_up"] not in ("none", "last", "all"):
            out.add(spec, "catch_up", "catch_up is none, last or all", "spec.catch_up")
        elif sources != ["schedule"]:
            out.add(spec, "catch_up", "catch_up applies to a schedule", "spec.catch_up")


def _check_templates(node: JsonObject, key: str, value: JsonValue, out: _Collector) -> None:
    for text in template_strings(value):
        if (problem := syntax_problem(text)) is not None:
            out.add(node, key, f"template does not parse: {problem}", f"spec.{key}")


def _check_schedule(schedule: JsonValue, spec: JsonObject, out: _Collector) -> None:
    if not isinstance(schedule, dict):
        out.add(spec, "schedule", "schedule is a mapping: {cron: ...} or {every: ...}",
                "spec.schedule")
        return
    for key in schedule:
        if key not in ("cron", "timezone", "every"):
            out.add(schedule, key, f"unknown key {key!r}"
                    f"{suggest(str(key), ('cron', 'timezone', 'every'))}", f"spec.schedule.{key}")
    if ("cron" in schedule) == ("every" in schedule):
        out.add(schedule, None, "a schedule has exactly one of cron and every", "spec.schedule")
        return
    if "every" in schedule and "timezone" in schedule:
        # nats-server refuses a time zone on @every (it is an interval, not a wall-clock time)
        out.add(schedule, "timezone", "timezone applies to cron, not to every",
                "spec.schedule.timezone")
    for key, check in (("cron", six_fields), ("every", every_seconds), ("timezone", zone)):
        if key not in schedule:
            continue
        text = schedule[key]
        if not isinstance(text, str):
            out.add(schedule, key, f"{key} is a string", f"spec.schedule.{key}")
            continue
        try:
            check(text)
        except ScheduleError as exc:
            out.add(schedule, key, str(exc), f"spec.schedule.{key}")


def _check_webhook(hook: JsonValue, spec: JsonObject, out: _Collector) -> None:
    secret = hook.get("secret") if isinstance(hook, dict) else None
    if not isinstance(hook, dict) or not set(hook) <= {"secret", "header"} or not isinstance(
            secret, str) or not secret.strip() or not isinstance(hook.get("header", ""), str):
        out.add(hook if isinstance(hook, dict) else spec, "secret" if isinstance(hook, dict)
                and "secret" in hook else "webhook",
                "webhook is {secret: <credential name>, header: <name>}: the credential whose "
                "secret signs each request, and the signature's header (optional)",
                "spec.webhook")


def _check_on(on: JsonValue, spec: JsonObject, out: _Collector) -> None:
    if not isinstance(on, dict):
        out.add(spec, "on", "on is a mapping: {subject: ..., when: ...} or {event: ...}",
                "spec.on")
        return
    for key in on:
        if key not in _ON_KEYS:
            out.add(on, key, f"unknown key {key!r}{suggest(str(key), _ON_KEYS)}",
                    f"spec.on.{key}")
    if ("subject" in on) == ("event" in on):
        out.add(on, None, "on has exactly one of subject and event", "spec.on")
    elif "subject" in on:
        _check_on_subject(on, out)
    else:
        _check_on_event(on, out)
    when = on.get("when")
    if when is not None:
        if not isinstance(when, str):
            out.add(on, "when", "when is a template string", "spec.on.when")
        elif (problem := syntax_problem(when)) is not None:
            out.add(on, "when", f"template does not parse: {problem}", "spec.on.when")


def _check_on_subject(on: JsonObject, out: _Collector) -> None:
    subject = on.get("subject")
    if not isinstance(subject, str) or not _valid_subject(subject):
        out.add(on, "subject", "a NATS subject is required (tokens separated by '.', '*' "
                "and a last '>' allowed)", "spec.on.subject")
    if "playbook" in on:
        out.add(on, "playbook", "playbook filters events: it goes with on.event",
                "spec.on.playbook")


def _check_on_event(on: JsonObject, out: _Collector) -> None:
    event = on.get("event")
    if not isinstance(event, str) or not _valid_subject(event) or "*" in event or ">" in event:
        out.add(on, "event", "an event type is required, e.g. execution.failed",
                "spec.on.event")
    if "playbook" in on and not isinstance(on["playbook"], str):
        out.add(on, "playbook", "playbook is a catalog path or a glob (etl/*)",
                "spec.on.playbook")


def _valid_subject(subject: str) -> bool:
    tokens = subject.split(".")
    if any(not t or any(c.isspace() for c in t) for t in tokens):
        return False
    return all(t != ">" or i == len(tokens) - 1 for i, t in enumerate(tokens))
