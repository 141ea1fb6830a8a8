"""NoETL's `kind: Subscription` documents: the typed model, the checks NoETL's server applies
when one is registered, and the refusal to run one."""

from __future__ import annotations

import textwrap

import pytest

from noetl_stream.dsl import parse_playbook
from noetl_stream.dsl.subscription import NOT_RUN, parse_subscription, subscription_in
from noetl_stream.errors import PlaybookError

PULL = textwrap.dedent("""\
    apiVersion: noetl.io/v1
    kind: Subscription
    metadata:
      name: batch_orders_stream
      path: subscriptions/batch_orders_stream
    spec:
      source: nats
      mode: pull
      activation: continuous
      auth: nats_e2e
      stream: BATCH_ORDERS
      consumer: batch-drain
      runtime: {target: dedicated-pool, pool: subscription, batch: 100, timeout_ms: 2000}
      dispatch:
        playbook: tests/fixtures/sub_ingest_default
        payload_from: message.json
        execution_pool: subscription
        batch_dispatch: true
        batch_max: 100
      dedup: {enabled: true, window_secs: 600}
      limits: {max_in_flight: 50, max_dispatch_per_sec: 20}
      headers:
        normalize: true
        directives:
          - {header: x-idempotency-key, controls: idempotency_key}
      spool: {mode: buffer_and_ack, backend: nats_object, bucket: spool, ordering: per_key}
""")

PUSH = textwrap.dedent("""\
    apiVersion: noetl.io/v1
    kind: Subscription
    metadata: {name: webhook_orders, path: subscriptions/webhook_orders}
    spec:
      source: webhook
      mode: push
      ingress:
        gateway_path: /ingress/orders
        verify: {type: hmac_sha256, header: X-Signature, secret: webhook_hmac_secret}
      dispatch: {playbook: tests/fixtures/handle_webhook}
""")


def test_a_pull_subscription_parses_into_the_typed_model() -> None:
    sub = parse_subscription(PULL, "s.yaml")

    assert (sub.name, sub.path, sub.api_version) == (
        "batch_orders_stream", "subscriptions/batch_orders_stream", "noetl.io/v1")
    assert (sub.spec.source, sub.spec.mode, sub.spec.activation, sub.spec.auth) == (
        "nats", "pull", "continuous", "nats_e2e")
    assert sub.spec.dispatch.playbook == "tests/fixtures/sub_ingest_default"
    assert sub.spec.dispatch.batch_dispatch is True and sub.spec.dispatch.batch_max == 100
    assert sub.spec.model_extra == {"stream": "BATCH_ORDERS", "consumer": "batch-drain"}
    assert sub.spec.limits == {"max_in_flight": 50, "max_dispatch_per_sec": 20}


def test_a_push_subscription_parses_with_its_ingress() -> None:
    sub = parse_subscription(PUSH)

    assert sub.spec.ingress is not None
    assert sub.spec.ingress.gateway_path == "/ingress/orders"
    assert sub.spec.ingress.verify.type == "hmac_sha256"
    assert sub.spec.dispatch.payload_from == "message.json"


@pytest.mark.parametrize(("change", "field", "message"), [
    (("source: nats", "source: sqs"), "spec.source", "'source' must be one of pubsub, nats, kafka, webhook"),
    (("mode: pull", "mode: poll"), "spec.mode", "'mode' must be one of pull, push"),
    (("activation: continuous", "activation: hourly"), "spec.activation",
     "'activation' must be one of continuous, scheduled"),
    (("playbook: tests/fixtures/sub_ingest_default", "playbook: ''"), "spec.dispatch.playbook",
     "'dispatch.playbook' is required"),
    (("batch_max: 100", "batch_max: 5000"), "spec.dispatch.batch_max", "at most 1000"),
    (("batch_dispatch: true", "batch_dispatch: yes-please"), "spec.dispatch.batch_dispatch",
     "must be a boolean"),
    (("window_secs: 600", "window_secs: 0"), "spec.dedup.window_secs", "positive integer"),
    (("max_in_flight: 50", "max_in_flight: -1"), "spec.limits.max_in_flight", "positive integer"),
    (("{header: x-idempotency-key, controls: idempotency_key}", "{header: x-idempotency-key}"),
     "spec.headers.directives[0]", "requires 'header' and 'controls'"),
    (("backend: nats_object, bucket: spool", "backend: nats_object"), "spec.spool.bucket",
     "'spool.backend' 'nats_object' requires a non-empty 'bucket'"),
    (("ordering: per_key", "ordering: random"), "spec.spool.ordering",
     "'spool.ordering' must be one of global, per_key, none"),
    (("apiVersion: noetl.io/v1", "apiVersion: noetl.io/v9"), "apiVersion", "a Subscription reads"),
])
def test_pull_checks_name_the_field(change: tuple[str, str], field: str, message: str) -> None:
    text = PULL.replace(*change)
    assert text != PULL

    with pytest.raises(PlaybookError) as caught:
        parse_subscription(text, "s.yaml")

    (issue,) = caught.value.issues
    assert issue.field == field and message in issue.message
    assert issue.file == "s.yaml" and issue.line is not None
    assert change[1] in text.splitlines()[issue.line - 1]  # the line that holds the field


@pytest.mark.parametrize(("change", "field", "message"), [
    (("gateway_path: /ingress/orders", "gateway_path: ingress/orders"),
     "spec.ingress.gateway_path", "absolute path starting with '/'"),
    (("type: hmac_sha256", "type: none"), "spec.ingress.verify.type", "push ingress always verifies"),
    (("header: X-Signature, ", ""), "spec.ingress.verify.header",
     "'ingress.verify.header' is required for verify.type 'hmac_sha256'"),
])
def test_push_checks_name_the_field(change: tuple[str, str], field: str, message: str) -> None:
    text = PUSH.replace(*change)
    assert text != PUSH

    with pytest.raises(PlaybookError) as caught:
        parse_subscription(text)

    (issue,) = caught.value.issues
    assert issue.field == field and message in issue.message


def test_a_push_subscription_without_ingress_is_refused() -> None:
    text = PUSH.split("  ingress:")[0] + "  dispatch: {playbook: p}\n"
    with pytest.raises(PlaybookError, match="'mode: push' requires an 'ingress' block"):
        parse_subscription(text)


def test_running_a_subscription_is_refused_saying_it_is_stored_not_run() -> None:
    with pytest.raises(PlaybookError) as caught:
        parse_playbook(PULL, "s.yaml")

    (issue,) = caught.value.issues
    assert issue.field == "kind" and issue.message == NOT_RUN
    assert "starts no execution from it" in issue.message and "`register` stores it" in issue.message
    assert "trigger apply" in issue.message


def test_subscription_in_tells_subscriptions_from_playbooks() -> None:
    assert subscription_in(PULL) is not None
    assert subscription_in("apiVersion: noetl.io/v2\nkind: Playbook\nmetadata: {name: x}\n") is None
    with pytest.raises(PlaybookError):
        subscription_in(PUSH.replace("mode: push", "mode: sideways"))


@pytest.mark.parametrize("value", ["[1, 2]", "{a: 1}", "7", "null", "true", "''"])
@pytest.mark.parametrize("key", [
    "source", "mode", "activation", "auth", "dispatch", "ingress", "runtime", "headers", "dedup",
    "limits", "spool"])
def test_any_value_in_any_field_is_a_located_issue_never_a_crash(key: str, value: str) -> None:
    base = PUSH if key == "ingress" else PULL
    spec_line = next(line for line in base.splitlines() if line.startswith(f"  {key}:")) \
        if f"\n  {key}:" in base else None
    text = base.replace(spec_line, f"  {key}: {value}") if spec_line else \
        base + f"  {key}: {value}\n"
    try:
        subscription_in(text, "s.yaml")
    except PlaybookError as exc:
        assert all(issue.file == "s.yaml" and issue.line for issue in exc.issues)


@pytest.mark.parametrize("value", ["[1]", "{x: 1}", "7"])
@pytest.mark.parametrize("field", ["type", "header", "gateway_path"])
def test_odd_ingress_values_are_issues(field: str, value: str) -> None:
    text = PUSH.replace("type: hmac_sha256", f"type: {value}" if field == "type" else
                        "type: hmac_sha256").replace(
        "header: X-Signature", f"header: {value}" if field == "header" else "header: X-Signature"
    ).replace("gateway_path: /ingress/orders",
              f"gateway_path: {value}" if field == "gateway_path" else "gateway_path: /ingress/orders")
    with pytest.raises(PlaybookError):
        subscription_in(text)
