"""NoETL's `kind: Subscription` catalog documents: parsed into a typed model and checked with the
rules NoETL's server applies when one is registered (noetl/server `src/services/catalog.rs`,
`validate_subscription_spec`; the fields its worker's runtime reads, `src/subscription.rs`).

A subscription names a message source (`nats`, `pubsub`, `kafka`, or a `webhook` pushed to a
gateway) and the playbook to start for each message (`dispatch.playbook`). NoETL activates it on
a long-running runtime; here `register` and the catalog API store and list it, `run` refuses it
with `NOT_RUN`, and `trigger apply` runs one whose form maps onto a trigger
(triggers/subscription_map.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeGuard

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from noetl_stream.dsl.source import line_of, load_yaml, plain
from noetl_stream.errors import Issue, PlaybookError, YamlSyntaxError
from noetl_stream.jsonutil import JsonObject

KIND = "Subscription"
API_VERSIONS = ("noetl.io/v1", "noetl.io/v2")
SOURCES = ("pubsub", "nats", "kafka", "webhook")
MODES = ("pull", "push")
ACTIVATIONS = ("continuous", "scheduled")
VERIFY_TYPES = {"hmac_sha256": ("header", "secret"), "bearer": ("secret",),
                "pubsub_oidc": ("audience", "service_account")}
SPOOL_MODES = ("off", "buffer_and_ack", "hybrid")
SPOOL_BACKENDS = ("nats_object", "local_disk", "gcs", "s3")
SPOOL_ORDERINGS = ("global", "per_key", "none")
MAX_BATCH = 1000  # NoETL's server batch cap

STORED = ("register stores it and the catalog lists it; `run` starts none (`trigger apply` runs "
          "one whose form maps onto a trigger)")
NOT_RUN = ("a Subscription is a catalog document: `register` stores it and the catalog lists it, "
           "but `run` starts no execution from it; `noetl-stream trigger apply FILE` runs one "
           "whose form maps onto a trigger (docs/triggers.md), or run the playbook its "
           "dispatch.playbook names")


class _Open(BaseModel):
    """Blocks NoETL reads only in part: the keys named here are typed, the others kept."""

    model_config = ConfigDict(frozen=True, extra="allow")


class Dispatch(_Open):
    playbook: str
    payload_from: str = "message.json"
    execution_pool: str | None = None
    batch_dispatch: bool = False
    batch_max: int | None = None


class Verify(_Open):
    type: str
    header: str | None = None
    secret: str | None = None
    audience: str | None = None
    service_account: str | None = None


class Ingress(_Open):
    gateway_path: str
    verify: Verify


class SubscriptionSpec(_Open):
    source: str
    mode: str
    activation: str = "continuous"
    auth: str | None = None
    dispatch: Dispatch
    ingress: Ingress | None = None
    runtime: JsonObject = Field(default_factory=dict)
    headers: JsonObject = Field(default_factory=dict)
    dedup: JsonObject | None = None
    limits: JsonObject | None = None
    spool: JsonObject | None = None


class Subscription(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    api_version: str
    kind: str = KIND
    name: str
    path: str | None = None
    version: str | None = None
    description: str | None = None
    spec: SubscriptionSpec
    file: str = "<string>"


def is_subscription(doc: object) -> TypeGuard[JsonObject]:
    return isinstance(doc, dict) and doc.get("kind") == KIND


Report = Callable[[object, str, str], None]  # (node the line is read from, field, message)


def _positive(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _text(node: object, key: str) -> str | None:
    value = node.get(key) if isinstance(node, dict) else None
    return value if isinstance(value, str) and value else None


def _check_choice(node: JsonObject, key: str, allowed: tuple[str, ...], prefix: str,
                  report: Report, *, required: bool = True) -> str | None:
    value = node.get(key)
    if value is None:
        if required:
            report(node, prefix + key, f"subscription spec requires '{key}' "
                   f"({' | '.join(allowed)})")
        return None
    if value not in allowed:
        report(node, prefix + key, f"subscription '{key}' must be one of {', '.join(allowed)}, "
               f"not {value!r}")
        return None
    return str(value)


def _check_ingress(spec: JsonObject, report: Report) -> None:
    ingress = spec.get("ingress")
    if not isinstance(ingress, dict):
        report(spec, "spec.ingress", "subscription 'mode: push' requires an 'ingress' block "
               "(gateway_path + verify)")
        return
    path = _text(ingress, "gateway_path")
    if path is None or not path.startswith("/"):
        report(ingress, "spec.ingress.gateway_path", "subscription 'ingress.gateway_path' is "
               "required for push and must be an absolute path starting with '/'")
    verify = ingress.get("verify")
    if not isinstance(verify, dict):
        report(ingress, "spec.ingress.verify", "subscription 'ingress' requires a 'verify' block "
               "(push always verifies)")
        return
    kind = verify.get("type")
    if not isinstance(kind, str) or kind not in VERIFY_TYPES:
        report(verify, "spec.ingress.verify.type", "subscription 'ingress.verify.type' must be "
               f"one of {', '.join(VERIFY_TYPES)}, not {kind!r} (push ingress always verifies)")
        return
    for field in VERIFY_TYPES[kind]:
        if _text(verify, field) is None:
            report(verify, f"spec.ingress.verify.{field}", f"subscription "
                   f"'ingress.verify.{field}' is required for verify.type '{kind}'")


def _check_dispatch(spec: JsonObject, report: Report) -> None:
    dispatch = spec.get("dispatch")
    if not isinstance(dispatch, dict):
        report(spec, "spec.dispatch", "subscription spec requires a 'dispatch' block with the "
               "playbook to run per message")
        return
    if _text(dispatch, "playbook") is None:
        report(dispatch, "spec.dispatch.playbook", "subscription 'dispatch.playbook' is required")
    if "batch_dispatch" in dispatch and not isinstance(dispatch["batch_dispatch"], bool):
        report(dispatch, "spec.dispatch.batch_dispatch",
               "subscription 'dispatch.batch_dispatch' must be a boolean")
    if "batch_max" in dispatch and not (_positive(dispatch["batch_max"])
                                        and dispatch["batch_max"] <= MAX_BATCH):
        report(dispatch, "spec.dispatch.batch_max", "subscription 'dispatch.batch_max' must be "
               f"a positive integer of at most {MAX_BATCH}")


def _check_blocks(spec: JsonObject, report: Report) -> None:
    dedup = spec.get("dedup")
    if dedup is not None:
        if not isinstance(dedup, dict):
            report(spec, "spec.dedup", "subscription 'dedup' must be a mapping")
        elif "enabled" in dedup and not isinstance(dedup["enabled"], bool):
            report(dedup, "spec.dedup.enabled", "subscription 'dedup.enabled' must be a boolean")
        elif "window_secs" in dedup and not _positive(dedup["window_secs"]):
            report(dedup, "spec.dedup.window_secs",
                   "subscription 'dedup.window_secs' must be a positive integer")
    limits = spec.get("limits")
    if limits is not None:
        if not isinstance(limits, dict):
            report(spec, "spec.limits", "subscription 'limits' must be a mapping")
        else:
            for key in ("max_in_flight", "max_dispatch_per_sec"):
                if key in limits and not _positive(limits[key]):
                    report(limits, f"spec.limits.{key}",
                           f"subscription 'limits.{key}' must be a positive integer")
    _check_headers(spec, report)
    _check_spool(spec, report)


def _check_headers(spec: JsonObject, report: Report) -> None:
    headers = spec.get("headers")
    if headers is None:
        return
    if not isinstance(headers, dict):
        report(spec, "spec.headers", "subscription 'headers' must be a mapping")
        return
    directives = headers.get("directives")
    if directives is None:
        return
    if not isinstance(directives, list):
        report(headers, "spec.headers.directives", "subscription 'headers.directives' must be a list")
        return
    for index, directive in enumerate(directives):
        if _text(directive, "header") is None or _text(directive, "controls") is None:
            report(directives, f"spec.headers.directives[{index}]", f"subscription "
                   f"'headers.directives[{index}]' requires 'header' and 'controls'")


def _check_spool(spec: JsonObject, report: Report) -> None:
    spool = spec.get("spool")
    if spool is None:
        return
    if not isinstance(spool, dict):
        report(spec, "spec.spool", "subscription 'spool' must be a mapping")
        return
    mode = spool.get("mode", "off")
    if mode not in SPOOL_MODES:
        report(spool, "spec.spool.mode", f"subscription 'spool.mode' must be one of "
               f"{', '.join(SPOOL_MODES)}, not {mode!r}")
        return
    if mode == "off":
        return
    backend = spool.get("backend", "nats_object")
    needs = "path" if backend == "local_disk" else "bucket"
    if backend not in SPOOL_BACKENDS:
        report(spool, "spec.spool.backend", f"subscription 'spool.backend' must be one of "
               f"{', '.join(SPOOL_BACKENDS)}, not {backend!r}")
    elif _text(spool, needs) is None:
        report(spool, f"spec.spool.{needs}", f"subscription 'spool.backend' '{backend}' requires "
               f"a non-empty '{needs}'")
    ordering = spool.get("ordering")
    if ordering is not None and ordering not in SPOOL_ORDERINGS:
        report(spool, "spec.spool.ordering", f"subscription 'spool.ordering' must be one of "
               f"{', '.join(SPOOL_ORDERINGS)}, not {ordering!r}")
    drain = spool.get("drain")
    if ordering == "global" and isinstance(drain, dict) and drain.get("on_recovery") == "interleave":
        report(spool, "spec.spool.drain.on_recovery", "subscription 'spool.drain.on_recovery: "
               "interleave' is unsafe with 'ordering: global'; use 'ordered_then_live' or "
               "'per_key'/'none' ordering")


def _check(doc: JsonObject, report: Report) -> None:
    if doc.get("apiVersion") not in API_VERSIONS:
        report(doc, "apiVersion", f"apiVersion is {doc.get('apiVersion')!r}; a Subscription "
               f"reads {' or '.join(API_VERSIONS)}")
    meta = doc.get("metadata")
    if not isinstance(meta, dict) or _text(meta, "name") is None:
        report(doc, "metadata.name", "metadata.name is required")
    spec = doc.get("spec")
    if not isinstance(spec, dict):
        report(doc, "spec", "kind: Subscription requires a 'spec' block (source, mode, dispatch)")
        return
    _check_choice(spec, "source", SOURCES, "spec.", report)
    mode = _check_choice(spec, "mode", MODES, "spec.", report)
    if mode == "pull":
        _check_choice(spec, "activation", ACTIVATIONS, "spec.", report, required=False)
    elif mode == "push":
        _check_ingress(spec, report)
    _check_dispatch(spec, report)
    _check_blocks(spec, report)


def subscription_from_doc(doc: JsonObject, file: str) -> Subscription:
    """The typed Subscription of a loaded document; PlaybookError with every issue found."""
    issues: list[Issue] = []

    def report(node: object, field: str, message: str) -> None:
        last = field.rsplit(".", 1)[-1]
        # `directives[2]` is read on the list's item; anything else on its mapping's key.
        key: int | str = int(last[last.index("[") + 1:-1]) if last.endswith("]") else last
        issues.append(Issue(file, line_of(node, key) or line_of(node) or 1, message,
                            field=field))

    _check(doc, report)
    if issues:
        raise PlaybookError(issues)
    data = plain(doc)
    meta = data.get("metadata")
    meta = meta if isinstance(meta, dict) else {}  # _check found it a mapping with a name
    version = meta.get("version")
    try:
        spec = SubscriptionSpec.model_validate(data["spec"])
    except ValidationError as exc:
        raise PlaybookError([
            Issue(file, line_of(doc["spec"]) or 1, f"{error['msg']}",
                  field="spec." + ".".join(str(part) for part in error["loc"]))
            for error in exc.errors()]) from None
    return Subscription(api_version=data["apiVersion"], name=str(meta["name"]),
                        path=meta.get("path"), version=None if version is None else str(version),
                        description=meta.get("description"), spec=spec, file=file)


def parse_subscription(text: str, file: str = "<string>") -> Subscription:
    try:
        doc = load_yaml(text)
    except YamlSyntaxError as exc:
        raise PlaybookError([Issue(file, exc.line, str(exc))]) from None
    if not is_subscription(doc):
        raise PlaybookError([Issue(file, line_of(doc, "kind") if isinstance(doc, dict) else 1,
                                   f"kind is {doc.get('kind') if isinstance(doc, dict) else None!r}"
                                   f"; expected {KIND!r}", field="kind")])
    return subscription_from_doc(doc, file)


def subscription_in(text: str, file: str = "<string>") -> Subscription | None:
    """The Subscription `text` holds, None when it holds something else (a playbook, or YAML the
    playbook parser reports on); PlaybookError when it is an invalid Subscription.
    """
    try:
        doc = load_yaml(text)
    except YamlSyntaxError:
        return None
    return subscription_from_doc(doc, file) if is_subscription(doc) else None
