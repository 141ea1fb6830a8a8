"""NoETL's `kind: Subscription` documents as triggers, where their form maps onto one.

* `source: nats, mode: pull` naming `subject`: `on: {subject}`, payload from `message.data`;
* `source: webhook, mode: push` with `verify: {type: hmac_sha256, header, secret}`:
  `webhook: {secret, header}`, named after the last segment of `ingress.gateway_path` (so
  deliveries go to `/api/hooks/<it>`), payload from `webhook.body`;
* `dispatch.playbook`: `playbook`.

Everything else is refused with the reason (`refusals`): sources without a connector here
(`pubsub`, `kafka`), a nats subscription naming only a stream and consumer, scheduled
activation, verification other than HMAC, batch dispatch, spooling, header directives, limits,
and a `payload_from` other than `message.json`. Settings that have no meaning here are said in
warnings: `auth` (the server connects with its own NATS user), `runtime` and
`dispatch.execution_pool` (a NoETL worker placement), `dedup` (each message starts at most one
execution here anyway). Pure: no I/O.
"""

from __future__ import annotations

import json

from noetl_stream.dsl.subscription import Subscription, subscription_in
from noetl_stream.errors import Issue, PlaybookError
from noetl_stream.triggers.document import OnMessage, Trigger, TriggerSpec, Webhook, parse_trigger


def document_trigger(text: str, file: str) -> tuple[Trigger, list[str]]:
    """The trigger a document describes: a `kind: Trigger`, or a Subscription mapped onto one;
    (trigger, warnings). PlaybookError naming every part of a Subscription that does not map.
    """
    subscription = subscription_in(text, file)
    if subscription is None:
        return parse_trigger(text, file), []
    return from_subscription(subscription)


def refusals(sub: Subscription) -> list[str]:
    """Why the Subscription does not map onto a trigger (nothing when it does)."""
    spec, out = sub.spec, []
    if spec.source not in ("nats", "webhook"):
        out.append(f"spec.source: {spec.source} has no connector here; publish its messages "
                   "on a NATS subject and apply a subject trigger")
    elif spec.source == "nats" and (spec.mode != "pull" or not _subject(sub)):
        out.append("spec: a nats subscription maps onto a subject trigger when it is mode: pull "
                   "and names its subject (spec.subject); a stream and consumer alone do not say "
                   "which messages to read")
    elif spec.source == "webhook" and (spec.ingress is None
                                       or spec.ingress.verify.type != "hmac_sha256"):
        out.append("spec.ingress.verify.type: only hmac_sha256 maps onto a signed webhook")
    if spec.activation != "continuous":
        out.append(f"spec.activation: {spec.activation} activation is not built; triggers run "
                   "continuously and are paused and resumed")
    if spec.dispatch.batch_dispatch:
        out.append("spec.dispatch.batch_dispatch: each message starts one execution here; batches "
                   "are not built")
    if spec.dispatch.payload_from != "message.json":
        out.append(f"spec.dispatch.payload_from: only message.json maps (the message's JSON is "
                   f"the payload), not {spec.dispatch.payload_from}")
    if spec.spool and spec.spool.get("mode", "off") != "off":
        out.append("spec.spool: spooling is not built (messages wait in JetStream)")
    if spec.headers.get("directives"):
        out.append("spec.headers.directives: header directives are not built")
    if spec.limits:
        out.append("spec.limits: dispatch limits are not built for triggers")
    return out


def warnings(sub: Subscription) -> list[str]:
    spec, out = sub.spec, []
    if spec.auth:
        out.append("spec.auth is not used: the server reads with its own NATS user")
    if spec.runtime or spec.dispatch.execution_pool:
        out.append("spec.runtime and spec.dispatch.execution_pool are not used: executions run "
                   "on the worker pools their playbook names")
    if spec.dedup:
        out.append("spec.dedup is not needed: each message starts at most one execution")
    return out


def from_subscription(sub: Subscription) -> tuple[Trigger, list[str]]:
    reasons = refusals(sub)
    if reasons:
        raise PlaybookError([Issue(sub.file, None, f"this Subscription does not map onto a "
                                   f"trigger: {reason}") for reason in reasons])
    spec = sub.spec
    playbook = spec.dispatch.playbook
    name = sub.name
    if spec.source == "nats":
        trigger_spec = TriggerSpec(playbook=playbook, on=OnMessage(subject=_subject(sub)),
                                   payload_from="message.data")
    else:
        assert spec.ingress is not None
        verify = spec.ingress.verify
        name = spec.ingress.gateway_path.rstrip("/").rsplit("/", 1)[-1] or sub.name
        trigger_spec = TriggerSpec(playbook=playbook,
                                   webhook=Webhook(secret=verify.secret or "", header=verify.header),
                                   payload_from="webhook.body")
    notes = warnings(sub)
    if spec.source == "webhook":
        notes.append(f"deliveries go to POST /api/hooks/{name}")
    # Checked as a trigger document is: a name NATS takes, a subject it takes.
    trigger = Trigger(name=name, spec=trigger_spec)
    parse_trigger(_as_document(trigger), sub.file)
    return trigger, notes


def _subject(sub: Subscription) -> str | None:
    extra = sub.spec.model_extra or {}
    value = extra.get("subject") or extra.get("filter_subject")
    return value if isinstance(value, str) and value else None


def _as_document(trigger: Trigger) -> str:
    body = trigger.spec.model_dump(mode="json", exclude_none=True, exclude_defaults=True)
    return json.dumps({"apiVersion": "noetl.io/v2", "kind": "Trigger",
                       "metadata": {"name": trigger.name}, "spec": body})
