"""Webhook and event sources, catch-up of missed fire times, and webhook signatures: pure logic."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from noetl_stream.errors import PlaybookError
from noetl_stream.triggers.catch_up import MAX_TIMES, instants, is_late, missed
from noetl_stream.triggers.cron import ScheduleError
from noetl_stream.triggers.document import Schedule, parse_trigger
from noetl_stream.triggers.signature import secret_of, sign, verify
from noetl_stream.triggers.subscription_map import document_trigger

HEADER = "apiVersion: noetl.io/v2\nkind: Trigger\nmetadata: {name: t}\n"


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def test_a_webhook_an_event_source_and_a_catch_up_policy_parse() -> None:
    hook = parse_trigger(HEADER + "spec: {playbook: a, webhook: {secret: hook-key}}\n")
    assert hook.spec.source == "webhook" and hook.spec.webhook is not None
    assert hook.spec.webhook.secret == "hook-key"
    event = parse_trigger(HEADER + "spec: {playbook: a, on: {event: execution.failed, "
                                   "playbook: 'etl/*'}}\n")
    assert event.spec.on is not None and event.spec.on.event == "execution.failed"
    assert event.spec.on.playbook == "etl/*" and event.spec.on.subject is None
    cron = parse_trigger(HEADER + "spec: {playbook: a, catch_up: all, schedule: {every: 5s}}\n")
    assert cron.spec.catch_up == "all"
    assert parse_trigger(HEADER + "spec: {playbook: a, schedule: {every: 5s}}\n"
                         ).spec.catch_up == "last"


@pytest.mark.parametrize(("spec", "field"), [
    ("{playbook: a, webhook: {}}", '"spec.webhook"'),
    ("{playbook: a, webhook: {secret: k, extra: 1}}", '"spec.webhook"'),
    ("{playbook: a, webhook: {secret: k}, schedule: {every: 1s}}", '"spec"'),
    ("{playbook: a, on: {event: 'execution.*'}}", '"spec.on.event"'),
    ("{playbook: a, on: {subject: a, event: b}}", '"spec.on"'),
    ("{playbook: a, on: {subject: a, playbook: 'etl/*'}}", '"spec.on.playbook"'),
    ("{playbook: a, catch_up: some, schedule: {every: 1s}}", '"spec.catch_up"'),
    ("{playbook: a, catch_up: all, on: {subject: a}}", '"spec.catch_up"'),
])
def test_bad_sources(spec: str, field: str) -> None:
    with pytest.raises(PlaybookError) as err:
        parse_trigger(HEADER + f"spec: {spec}\n", "t.yaml")
    assert any(f"field {field}" in str(i) for i in err.value.issues), err.value.issues


def test_missed_cron_times_lie_strictly_between_the_mark_and_the_fire() -> None:
    every_2s = Schedule(cron="*/2 * * * * *")
    assert missed(every_2s, at("2026-11-26T10:00:10"), at("2026-11-26T10:00:12")) == []
    assert missed(every_2s, at("2026-11-26T10:00:10"), at("2026-11-26T10:00:18")) == [
        at("2026-11-26T10:00:12"), at("2026-11-26T10:00:14"), at("2026-11-26T10:00:16")]
    assert missed(every_2s, None, at("2026-11-26T10:00:18")) == []


def test_a_long_downtime_keeps_the_latest_missed_times_without_walking_from_its_start() -> None:
    every_second = Schedule(cron="* * * * * *")
    mark, nominal = at("2026-11-19T10:00:00"), at("2026-11-26T10:00:00")  # a week of seconds
    got = missed(every_second, mark, nominal)
    assert len(got) == MAX_TIMES
    assert got[0] == nominal - timedelta(seconds=MAX_TIMES) and got[-1] == nominal - timedelta(
        seconds=1)
    hourly = Schedule(cron="0 * * * *")  # sparse: the window grows to the mark
    assert len(missed(hourly, mark, nominal)) == 7 * 24 - 1


def test_missed_interval_times_follow_the_old_grid_until_half_a_step_before_the_fire() -> None:
    every_4s = Schedule(every="4s")
    mark = at("2026-11-26T10:00:00")
    assert missed(every_4s, mark, mark + timedelta(seconds=4.01)) == []
    assert missed(every_4s, mark, mark + timedelta(seconds=13.5)) == [
        mark + timedelta(seconds=4), mark + timedelta(seconds=8)]
    assert missed(every_4s, mark, mark + timedelta(seconds=14.5)) == [
        mark + timedelta(seconds=s) for s in (4, 8, 12)]


def test_a_cron_fire_stored_a_second_after_its_instant_is_late() -> None:
    cron, interval = Schedule(cron="0 * * * *"), Schedule(every="1h")
    nominal = at("2026-11-26T10:00:00")
    assert not is_late(cron, nominal, nominal + timedelta(milliseconds=30))
    assert is_late(cron, nominal, nominal + timedelta(seconds=40))
    assert not is_late(interval, nominal, nominal + timedelta(seconds=40))


def test_backfill_instants_cover_the_range_inclusively_in_the_schedules_zone() -> None:
    daily = Schedule(cron="0 2 * * *", timezone="Europe/Amsterdam")
    got = instants(daily, at("2026-10-24T00:00:00"), at("2026-10-26T01:00:00"))
    # 02:00 CEST is 00:00 UTC, 02:00 CET 01:00 UTC; on 25 October the hour from 02:00 comes
    # twice (clocks go back at 03:00 CEST) and fires at both instants, as nats-server does
    assert got == [at("2026-10-24T00:00:00"), at("2026-10-25T00:00:00"),
                   at("2026-10-25T01:00:00"), at("2026-10-26T01:00:00")]
    assert instants(Schedule(every="5m"), at("2026-11-26T10:00:00"),
                    at("2026-11-26T10:12:00")) == [at("2026-11-26T10:00:00"),
                                                   at("2026-11-26T10:05:00"),
                                                   at("2026-11-26T10:10:00")]
    with pytest.raises(ScheduleError, match=str(MAX_TIMES)):
        instants(Schedule(every="1s"), at("2026-11-26T10:00:00"), at("2026-11-26T11:00:00"))


def test_a_signature_is_the_hmac_of_the_exact_body() -> None:
    body = b'{"order": "A-1"}'
    good = sign("s3cret", body)
    assert good.startswith("sha256=") and len(good) == 7 + 64
    assert verify("s3cret", body, good)
    assert not verify("s3cret", body + b" ", good)
    assert not verify("other", body, good)
    assert not verify("s3cret", body, None)
    assert verify("s3cret", body, good.removeprefix("sha256="))  # the bare digest
    assert not verify("s3cret", body, "sha256=" + "0" * 64)
    assert secret_of({"secret": "a"}) == "a" and secret_of({"token": "b"}) == "b"
    assert secret_of({"header": "X", "value": "c"}) == "c" and secret_of({"host": "h"}) is None


SUB_HEAD = "apiVersion: noetl.io/v1\nkind: Subscription\nmetadata: {name: orders, path: subs/orders}\n"


def test_a_nats_pull_subscription_naming_its_subject_maps_onto_a_subject_trigger() -> None:
    trigger, notes = document_trigger(SUB_HEAD + """spec:
  source: nats
  mode: pull
  auth: nats_main
  subject: "orders.*.created"
  stream: ORDERS
  dispatch: {playbook: etl/orders}
  dedup: {enabled: true, window_secs: 600}
""", "s.yaml")
    assert trigger.name == "orders" and trigger.spec.playbook == "etl/orders"
    assert trigger.spec.on is not None and trigger.spec.on.subject == "orders.*.created"
    assert trigger.spec.payload_from == "message.data"
    assert [n.split(" ")[0] for n in notes] == ["spec.auth", "spec.dedup"]


def test_a_signed_push_webhook_subscription_maps_onto_a_webhook_trigger() -> None:
    trigger, notes = document_trigger(SUB_HEAD + """spec:
  source: webhook
  mode: push
  ingress:
    gateway_path: /ingress/stripe
    verify: {type: hmac_sha256, header: X-Signature, secret: stripe_hmac}
  dispatch: {playbook: etl/payments}
""", "s.yaml")
    assert trigger.name == "stripe" and trigger.spec.webhook is not None
    assert (trigger.spec.webhook.secret, trigger.spec.webhook.header) == ("stripe_hmac",
                                                                          "X-Signature")
    assert trigger.spec.payload_from == "webhook.body"
    assert notes == ["deliveries go to POST /api/hooks/stripe"]


def test_subscriptions_that_do_not_map_are_refused_with_every_reason() -> None:
    with pytest.raises(PlaybookError) as err:
        document_trigger(SUB_HEAD + """spec:
  source: nats
  mode: pull
  activation: scheduled
  stream: ORDERS
  consumer: drain
  dispatch: {playbook: etl/orders, batch_dispatch: true, batch_max: 10}
  spool: {mode: buffer_and_ack, backend: nats_object, bucket: b}
  limits: {max_in_flight: 5}
""", "s.yaml")
    reasons = [str(i) for i in err.value.issues]
    assert len(reasons) == 5, reasons
    assert all(r.startswith("s.yaml: this Subscription does not map onto a trigger: ")
               for r in reasons)
    for field in ("names its subject", "spec.activation", "spec.dispatch.batch_dispatch",
                  "spec.spool", "spec.limits"):
        assert any(field in r for r in reasons), (field, reasons)
    with pytest.raises(PlaybookError, match="pubsub has no connector"):
        document_trigger(SUB_HEAD + "spec: {source: pubsub, mode: pull, subscription: s, "
                                    "dispatch: {playbook: a}}\n", "s.yaml")
    with pytest.raises(PlaybookError, match="only hmac_sha256"):
        document_trigger(SUB_HEAD + """spec:
  source: webhook
  mode: push
  ingress: {gateway_path: /in/x, verify: {type: bearer, secret: tok}}
  dispatch: {playbook: a}
""", "s.yaml")
