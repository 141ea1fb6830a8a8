"""Webhook and event sources, catch-up of missed fire times, and webhook signatures: pure logic."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from noetl_stream.errors import PlaybookError
from noetl_stream.triggers.catch_up import MAX_TIMES, instants, is_late, missed
from noetl_stream.triggers.cron import ScheduleError
from noetl_stream.triggers.document import Schedule, parse_trigger
from noetl_stream.triggers.signature import secret_of, sign, verify

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
    assert not verify("s3cret", body, good.removeprefix("sha256="))
    assert secret_of({"secret": "a"}) == "a" and secret_of({"token": "b"}) == "b"
    assert secret_of({"header": "X", "value": "c"}) == "c" and secret_of({"host": "h"}) is None
