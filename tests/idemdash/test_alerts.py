"""idemdash.dashboard.alerts: each metric against known data, the fire / stay / resolve / fire-again
cycle, notifications enqueued once and then really sent, and evaluators racing."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
import time_machine
from django.core import mail
from django.db import connections
from django.utils import timezone

from idemdash.dashboard import alert_rules, alerts
from idemdash.dashboard.models import Alert, AlertRule
from idemdash.core.schedules import declared_schedules
from idemdash.dashboard.tasks import evaluate_alerts
from receipts import observe, store
from idemdash.core.models import AuditEntry
from receipts.outbox import store as outbox
from receipts.outbox.drain import drain
from receipts.outbox.models import OutboxMessage
from tests.concurrently import in_forked_processes
from tests.dashboard.build import EXPECTED_STATS, known_traffic, stuck
from tests.receipts.outbox.receiver import running_receiver
from webhooks.models import RejectedDelivery, WebhookEndpoint, WebhookEvent

Metric = AlertRule.Metric
M = timedelta(minutes=1)


def rule(metric: str = Metric.STUCK_ROWS, threshold: float = 0, *, window: int = 60, name: str | None = None,
         channel: str = "email", target: str = "ops@example.com", comparison: str = ">", enabled: bool = True) -> AlertRule:
    return AlertRule.objects.create(
        name=name or f"{metric} {comparison} {threshold:g}", metric=metric, comparison=comparison,
        threshold=threshold, window_minutes=window, channel=channel, target=target, enabled=enabled,
    )


def measure(metric: str, window: int, now) -> float:
    return alerts.Measurements(now)(metric, window)


# --- windows and targets ------------------------------------------------------------------


@pytest.mark.parametrize("text,minutes", [("1h", 60), ("24h", 1440), ("7d", 10080), ("30d", 43200),
                                          ("15m", 15), ("15", 15), (" 2H ", 120)])
def test_a_window_is_read_as_the_dashboards_names_or_minutes(text, minutes):
    assert alert_rules.parse_window_minutes(text) == minutes


@pytest.mark.parametrize("text", ["", "0", "31d", "1w", "-5", "1.5h"])
def test_a_window_outside_one_minute_to_thirty_days_is_refused(text):
    with pytest.raises(alert_rules.ValidationError):
        alert_rules.parse_window_minutes(text)


def test_window_labels_use_the_dashboards_names():
    assert [alert_rules.window_label(m) for m in (60, 1440, 10080, 43200, 15, 120)] == ["1h", "24h", "7d", "30d", "15m", "2h"]


# --- metrics against known data ---------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("window,minutes", [("1h", 60), ("24h", 1440), ("7d", 10080)])
def test_receipt_metrics_are_the_overviews_figures(window, minutes):
    now = timezone.now()
    known_traffic(now)
    expected = EXPECTED_STATS[window]
    assert measure(Metric.DUPLICATE_RATE, minutes, now) == expected["duplicate_rate"]
    assert measure(Metric.CONCURRENT_DUPLICATES, minutes, now) == expected["concurrent_duplicates"]
    assert measure(Metric.MISMATCH_CONFLICTS, minutes, now) == expected["mismatch_conflicts"]


@pytest.mark.django_db
def test_receipt_metrics_work_over_a_window_the_overview_does_not_have():
    now = timezone.now()
    known_traffic(now)
    # The last 15 minutes: a3 claimed, a3's 422, a4 claimed (see known_traffic).
    assert measure(Metric.DUPLICATE_RATE, 15, now) == round(1 / 3, 4)
    assert measure(Metric.MISMATCH_CONFLICTS, 15, now) == 1
    assert measure(Metric.CONCURRENT_DUPLICATES, 15, now) == 0


@pytest.mark.django_db
def test_failing_keys_counts_keys_that_failed_at_least_twice_in_the_window():
    now = timezone.now()
    known_traffic(now)  # b1 failed twice ~10 h ago; c1 once 3 days ago; e1 once 40 days ago
    assert measure(Metric.FAILING_KEYS, 60, now) == 0
    assert measure(Metric.FAILING_KEYS, 1440, now) == 1
    assert measure(Metric.FAILING_KEYS, 10080, now) == 1
    for _ in range(3):  # failing and retried three times: one key, not three
        claim = store.claim("client:shop", "f1", "email.send", {"k": "f1"})
        store.fail(store.Held("client:shop", "f1", claim.token), error="smtp down")
    assert measure(Metric.FAILING_KEYS, 60, timezone.now()) == 1


def _endpoint() -> WebhookEndpoint:
    return WebhookEndpoint.objects.get_or_create(slug="stripe", defaults={"provider": "stripe"})[0]


def _event(n: int, status: str, *, finished=None, lease=None) -> WebhookEvent:
    now = timezone.now()
    return WebhookEvent.objects.create(
        endpoint=_endpoint(), provider="stripe", dedupe_key=f"evt_{n}", event_type="charge.succeeded",
        payload={"id": f"evt_{n}"}, payload_sha256="0" * 64, status=status, next_attempt_at=now,
        received_at=now, last_delivery_at=now, finished_at=finished, lease_expires_at=lease,
    )


@pytest.mark.django_db
def test_stuck_rows_add_up_receipts_webhook_events_and_outbox_messages_past_their_lease():
    now = timezone.now()
    stuck("r1")
    _event(1, "processing", lease=now - M)
    _event(2, "processing", lease=now + M)  # within its lease: working, not stuck
    with time_machine.travel(now - 10 * M, tick=False):
        outbox.enqueue("email.send", {"to": "a@example.com", "subject": "s", "body": "b"}, "m-stuck")
        assert len(outbox.claim_batch("dead-drainer", lease_seconds=60)) == 1
    assert measure(Metric.STUCK_ROWS, 60, timezone.now()) == 3
    # It describes the present: the window does not matter.
    assert measure(Metric.STUCK_ROWS, 1, timezone.now()) == 3


@pytest.mark.django_db
def test_dead_webhook_events_counts_events_that_died_in_the_window():
    now = timezone.now()
    _event(1, "dead", finished=now - 30 * M)
    _event(2, "dead", finished=now - timedelta(days=3))
    _event(3, "completed", finished=now - M)
    assert measure(Metric.DEAD_WEBHOOK_EVENTS, 60, now) == 1
    assert measure(Metric.DEAD_WEBHOOK_EVENTS, 10080, now) == 2


def _dead_message(key: str) -> OutboxMessage:
    outbox.enqueue("email.send", {"to": "a@example.com", "subject": "s", "body": "b"}, key)
    message = outbox.claim_batch("d1")[0]
    assert outbox.mark_failed(message, "550 no such user", permanent=True) == "dead"
    return OutboxMessage.objects.get(key=key)


@pytest.mark.django_db
def test_dead_outbox_messages_counts_messages_now_dead_that_died_in_the_window():
    with time_machine.travel(timezone.now() - timedelta(hours=3), tick=False):
        _dead_message("old")
    message = _dead_message("new")
    now = timezone.now()
    assert measure(Metric.DEAD_OUTBOX_MESSAGES, 60, now) == 1
    assert measure(Metric.DEAD_OUTBOX_MESSAGES, 1440, now) == 2
    outbox.send_again(message, actor="otto")  # repaired: no longer counts
    assert measure(Metric.DEAD_OUTBOX_MESSAGES, 60, timezone.now()) == 0


@pytest.mark.django_db
def test_outbox_backlog_age_is_the_age_of_the_oldest_message_not_yet_sent_or_dead():
    now = timezone.now()
    assert measure(Metric.OUTBOX_BACKLOG_AGE, 60, now) == 0
    with time_machine.travel(now - timedelta(seconds=600), tick=False):
        outbox.enqueue("email.send", {"to": "a@example.com", "subject": "s", "body": "b"}, "waiting")
    with time_machine.travel(now - timedelta(seconds=900), tick=False):
        _dead_message("dead-one")  # older, but dead: not backlog
    with time_machine.travel(now - timedelta(seconds=300), tick=False):
        outbox.enqueue("email.send", {"to": "a@example.com", "subject": "s", "body": "b"}, "newer")
    assert measure(Metric.OUTBOX_BACKLOG_AGE, 60, now) == 600


@pytest.mark.django_db
def test_rejected_deliveries_counts_verification_failures_in_the_window():
    now = timezone.now()
    for minutes, cause in ((10, "no_matching_signature"), (120, "stale_timestamp"), (3000, "missing_header")):
        RejectedDelivery.objects.create(provider="stripe", cause=cause, received_at=now - minutes * M)
    assert measure(Metric.REJECTED_DELIVERIES, 60, now) == 1
    assert measure(Metric.REJECTED_DELIVERIES, 1440, now) == 2


@pytest.mark.django_db
@pytest.mark.urls("tests.dashboard.coverage_urls")
def test_a_rule_on_unprotected_duplicates_fires_once_a_request_is_repeated_and_not_before(client):
    r = rule(Metric.UNPROTECTED_DUPLICATES, 0)
    client.post("/notes/", '{"text": "hi"}', content_type="application/json")
    client.post("/notes/", '{"text": "other"}', content_type="application/json")  # another request: no repeat
    observe.flush()
    quiet = alerts.evaluate()
    assert (quiet.fired, quiet.values) == ([], {r.name: 0.0})
    client.post("/notes/", '{"text": "hi"}', content_type="application/json")  # the first, again: it ran again
    observe.flush()
    result = alerts.evaluate()
    alert = Alert.objects.get()
    assert result.fired == [alert.pk] and alert.value == 1.0
    assert "Would-be duplicates on unprotected routes is 1 (> 0 over 1h)" in OutboxMessage.objects.get().payload["subject"]


def test_every_metric_has_a_function():
    assert set(alerts.METRICS) == set(Metric.values)


# --- the alert cycle ------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_breached_rule_fires_once_and_enqueues_one_email():
    r = rule(Metric.STUCK_ROWS, 0)
    stuck("r1")
    result = alerts.evaluate()
    alert = Alert.objects.get()
    assert result.fired == [alert.pk] and result.values == {r.name: 1.0}
    assert (alert.state, alert.value, alert.rule_name, alert.metric) == ("firing", 1.0, r.name, "stuck_rows")
    message = OutboxMessage.objects.get()
    assert message.key == alert.fired_notification_key == f"idemdash:alert:{alert.pk}:fired"
    assert message.action == "email.send"
    assert message.payload["to"] == "ops@example.com"
    assert message.payload["subject"].startswith(f"[idemdash] [FIRING] {r.name}: Stuck rows")
    assert "is 1 (> 0 now)" in message.payload["body"]


@pytest.mark.django_db
def test_a_rule_that_stays_breached_stays_firing_without_a_second_notification():
    rule(Metric.STUCK_ROWS, 0)
    stuck("r1")
    alerts.evaluate()
    stuck("r2")
    again = alerts.evaluate()
    assert (again.fired, again.still_firing) == ([], 1)
    assert Alert.objects.count() == 1 and OutboxMessage.objects.count() == 1


@pytest.mark.django_db
def test_an_alert_resolves_when_the_condition_clears_and_notifies_once():
    rule(Metric.STUCK_ROWS, 0)
    receipt = stuck("r1")
    alerts.evaluate()
    store.release(receipt, actor="otto")  # no longer stuck
    result = alerts.evaluate()
    alert = Alert.objects.get()
    assert result.resolved == [alert.pk]
    assert (alert.state, alert.resolved_value, alert.resolved_reason) == ("resolved", 0.0, "condition cleared")
    assert alert.resolved_at is not None
    resolved = OutboxMessage.objects.get(key=f"idemdash:alert:{alert.pk}:resolved")
    assert alert.resolved_notification_key == resolved.key
    assert resolved.payload["subject"].startswith("[idemdash] [RESOLVED]")
    assert alerts.evaluate().resolved == []  # nothing more to resolve
    assert OutboxMessage.objects.count() == 2


@pytest.mark.django_db
def test_firing_again_later_opens_a_new_alert_with_its_own_notification():
    rule(Metric.STUCK_ROWS, 0)
    first = stuck("r1")
    alerts.evaluate()
    store.release(first, actor="otto")
    alerts.evaluate()
    stuck("r2")
    result = alerts.evaluate()
    assert len(result.fired) == 1
    old, new = Alert.objects.order_by("id")
    assert (old.state, new.state) == ("resolved", "firing")
    assert sorted(OutboxMessage.objects.values_list("key", flat=True)) == sorted([
        f"idemdash:alert:{old.pk}:fired", f"idemdash:alert:{old.pk}:resolved", f"idemdash:alert:{new.pk}:fired"])


@pytest.mark.django_db
def test_the_comparison_is_strict_or_not_as_the_rule_says():
    stuck("r1")
    strict = rule(Metric.STUCK_ROWS, 1, comparison=">")
    inclusive = rule(Metric.STUCK_ROWS, 1, comparison=">=")
    alerts.evaluate()
    assert list(Alert.objects.values_list("rule", flat=True)) == [inclusive.pk]
    assert not Alert.objects.filter(rule=strict).exists()


@pytest.mark.django_db
def test_disabling_a_firing_rule_resolves_its_alert_and_a_disabled_rule_never_fires():
    r = rule(Metric.STUCK_ROWS, 0)
    rule(Metric.STUCK_ROWS, 0, name="off", enabled=False)
    stuck("r1")
    alerts.evaluate()
    r.enabled = False
    r.save()
    result = alerts.evaluate()
    alert = Alert.objects.get()
    assert result.resolved == [alert.pk] and result.evaluated == 0
    assert (alert.state, alert.resolved_reason) == ("resolved", "rule disabled")


@pytest.mark.django_db
def test_a_webhook_rule_posts_slack_compatible_json_with_the_figures(settings):
    settings.IDEMDASH_BASE_URL = "https://idemdash.example.com"
    r = rule(Metric.DUPLICATE_RATE, 20, channel="webhook", target="https://hooks.slack.com/services/T/B/X")
    now = timezone.now()
    known_traffic(now)
    alerts.evaluate(now)
    alert = Alert.objects.get()
    message = OutboxMessage.objects.get()
    assert message.action == "http.post"
    assert message.payload["url"] == "https://hooks.slack.com/services/T/B/X"
    body = message.payload["json"]
    assert body["text"] == (f"[FIRING] {r.name}: Duplicate rate is 55.56% (> 20% over 1h) "
                            "<https://idemdash.example.com/?window=1h>")
    assert body["alert"] == {
        "alert_id": alert.pk, "transition": "fired", "rule": r.name, "state": "firing", "metric": "duplicate_rate", "comparison": ">",
        "threshold": 20.0, "unit": "percent", "window_minutes": 60, "value": 55.56, "resolved_value": None,
        "fired_at": now.isoformat(), "resolved_at": None, "url": "https://idemdash.example.com/?window=1h",
        "incident_url": f"https://idemdash.example.com/incidents/{alert.pk}/",
    }


@pytest.mark.django_db
@pytest.mark.parametrize("threshold, fires", [(20, True), (55.5, True), (55.56, False), (60, False)])
def test_a_rate_threshold_is_in_percent_as_the_tile_shows_it(threshold, fires):
    # known_traffic's duplicate rate over the hour is 0.5556, which the tile shows as 55.56%.
    now = timezone.now()
    known_traffic(now)
    r = rule(Metric.DUPLICATE_RATE, threshold)
    assert r.condition == f"Duplicate rate > {threshold:g}% over 1h"
    assert bool(alerts.evaluate(now).fired) is fires


@pytest.mark.parametrize("metric, value, text", [
    (Metric.DUPLICATE_RATE, 0.3674, "36.74%"), (Metric.DUPLICATE_RATE, 0.2, "20%"),
    (Metric.OUTBOX_BACKLOG_AGE, 200, "3 min"), (Metric.OUTBOX_BACKLOG_AGE, 0, "0 s"), (Metric.STUCK_ROWS, 3, "3"),
])
def test_a_figure_is_formatted_as_its_tile_formats_it(metric, value, text):
    assert alerts.format_value(metric, value) == text


@pytest.mark.parametrize("metric, path", [
    (Metric.MISMATCH_CONFLICTS, "/receipts/?conflict=422"), (Metric.STUCK_ROWS, "/stuck/"),
    (Metric.DEAD_WEBHOOK_EVENTS, "/events/?status=dead"), (Metric.OUTBOX_BACKLOG_AGE, "/outbox/?status=waiting"),
    (Metric.DUPLICATE_RATE, "/?window=24h"), (Metric.UNPROTECTED_DUPLICATES, "/coverage/"),
])
def test_a_notification_links_to_the_filtered_page_that_shows_the_cause(settings, metric, path):
    settings.IDEMDASH_BASE_URL = "https://ops.example.com"
    assert alerts.cause_url(metric, 24 * 60) == "https://ops.example.com" + path


@pytest.mark.django_db
def test_the_email_carries_the_link_to_the_cause(settings):
    settings.IDEMDASH_BASE_URL = "https://ops.example.com"
    rule(Metric.STUCK_ROWS, 0)
    stuck("order-stuck")
    alerts.evaluate()
    body = OutboxMessage.objects.get().payload["body"]
    assert "See what caused it: https://ops.example.com/stuck/" in body


@pytest.mark.django_db(transaction=True)
def test_a_concurrent_duplicates_rule_fires_for_callers_that_waited_for_the_first_attempt():
    from tests.dashboard.build import waited_for

    r = rule(Metric.CONCURRENT_DUPLICATES, 2, window=15)
    waited_for("simultaneous", waiters=3)  # no 409 at all: every duplicate waited
    result = alerts.evaluate()
    assert result.values == {r.name: 3.0}
    alert = Alert.objects.get()
    assert (alert.state, alert.metric) == ("firing", "concurrent_duplicates")
    assert alerts.cause_url(Metric.CONCURRENT_DUPLICATES, 15).endswith("/receipts/?conflict=concurrent")


@pytest.mark.django_db
def test_a_target_the_outbox_now_refuses_still_fires_the_alert_and_says_why(settings):
    rule(Metric.STUCK_ROWS, 0, channel="webhook", target="https://hooks.example.com/x")
    settings.OUTBOX_HTTP_ALLOWED_HOSTS = ["hooks.slack.com"]  # narrowed after the rule was saved
    stuck("r1")
    alerts.evaluate()
    alert = Alert.objects.get()
    assert alert.state == "firing" and alert.fired_notification_key == ""
    assert "OUTBOX_HTTP_ALLOWED_HOSTS" in alert.notification_error
    assert not OutboxMessage.objects.exists()


@pytest.mark.django_db
def test_the_database_refuses_a_second_firing_alert_for_a_rule():
    from django.db import IntegrityError, transaction

    r = rule()
    now = timezone.now()
    Alert.objects.create(rule=r, rule_name=r.name, metric=r.metric, condition="c", value=1, fired_at=now)
    with pytest.raises(IntegrityError), transaction.atomic():
        Alert.objects.create(rule=r, rule_name=r.name, metric=r.metric, condition="c", value=2, fired_at=now)
    Alert.objects.filter(rule=r).update(state="resolved")
    Alert.objects.create(rule=r, rule_name=r.name, metric=r.metric, condition="c", value=3, fired_at=now)
    assert Alert.objects.filter(rule=r).count() == 2


# --- notifications are actually sent --------------------------------------------------------


@pytest.mark.django_db
def test_the_drain_sends_the_fired_and_resolved_emails_once_each():
    # Django's test environment sends every mailer's mail to mail.outbox (locmem).
    rule(Metric.STUCK_ROWS, 0, name="stuck rows")
    receipt = stuck("r1")
    alerts.evaluate()
    alerts.evaluate()
    assert drain().sent == 1
    store.release(receipt, actor="otto")
    alerts.evaluate()
    assert drain().sent == 1
    assert drain().sent == 0
    alert = Alert.objects.get()
    assert [m.subject for m in mail.outbox] == [
        "[idemdash] [FIRING] stuck rows: Stuck rows (receipts, webhook events, outbox messages) is 1 (> 0 now)",
        mail.outbox[1].subject,
    ]
    assert mail.outbox[1].subject.startswith("[idemdash] [RESOLVED] stuck rows: Stuck rows (receipts, webhook events, outbox messages), now 0 (condition cleared)")
    assert mail.outbox[0].to == ["ops@example.com"]
    assert mail.outbox[0].extra_headers["X-Idempotency-Key"] == f"idemdash:alert:{alert.pk}:fired"
    assert mail.outbox[1].extra_headers["X-Idempotency-Key"] == f"idemdash:alert:{alert.pk}:resolved"


@pytest.mark.django_db
def test_the_drain_posts_the_fired_and_resolved_webhook_notifications_to_a_receiver_once_each(outbox_may_post_locally):
    with running_receiver() as receiver:
        r = rule(Metric.STUCK_ROWS, 0, channel="webhook", target=receiver.url)
        receipt = stuck("r1")
        alerts.evaluate()
        alerts.evaluate()
        fired_report = drain()
        store.release(receipt, actor="otto")
        alerts.evaluate()
        alerts.evaluate()
        resolved_report = drain()
        alert = Alert.objects.get()
    assert (fired_report.sent, resolved_report.sent) == (1, 1)
    fired, resolved = f"idemdash:alert:{alert.pk}:fired", f"idemdash:alert:{alert.pk}:resolved"
    assert receiver.requests == {fired: 1, resolved: 1}
    bodies = {key: body for body, keys in receiver.keys_by_body.items() for key in keys}
    assert f'"text": "[FIRING] {r.name}: Stuck rows' in bodies[fired] and '"alert_id": %d' % alert.pk in bodies[fired]
    assert f'"text": "[RESOLVED] {r.name}: Stuck rows' in bodies[resolved] and '"state": "resolved"' in bodies[resolved]


# --- evaluators racing ------------------------------------------------------------------------


RACE_RULES = 4
PROCESSES, THREADS = 3, 4  # 12 evaluators, each with its own connection


def _evaluator(barrier, out: list) -> None:
    try:
        barrier.wait(30)
        result = alerts.evaluate()
        out.append((len(result.fired), len(result.resolved)))
    finally:
        connections.close_all()


def _threads(out: list) -> None:
    barrier = threading.Barrier(THREADS)
    threads = [threading.Thread(target=_evaluator, args=(barrier, out)) for _ in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)


def _process(go, queue) -> None:
    go.wait(30)
    out: list = []
    _threads(out)
    queue.put(out)


def _race() -> list[tuple[int, int]]:
    results = in_forked_processes(_process, [()] * PROCESSES, timeout=120)
    assert len(results) == PROCESSES * THREADS
    return results


@pytest.mark.django_db(transaction=True)
def test_evaluators_racing_in_threads_fire_each_rule_once():
    for n in range(RACE_RULES):
        rule(Metric.STUCK_ROWS, 0, name=f"race {n}")
    stuck("r1")
    out: list = []
    barrier = threading.Barrier(8)
    threads = [threading.Thread(target=_evaluator, args=(barrier, out)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(out) == 8 and sum(fired for fired, _ in out) == RACE_RULES
    assert Alert.objects.filter(state="firing").count() == RACE_RULES
    assert OutboxMessage.objects.count() == RACE_RULES


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_evaluators_racing_in_processes_and_threads_fire_once_and_resolve_once():
    for n in range(RACE_RULES):
        rule(Metric.STUCK_ROWS, 0, name=f"race {n}")
    receipt = stuck("r1")
    fired = _race()
    assert sum(f for f, _ in fired) == RACE_RULES
    assert Alert.objects.filter(state="firing").count() == RACE_RULES
    assert OutboxMessage.objects.filter(key__endswith=":fired").count() == RACE_RULES

    store.release(receipt, actor="otto")
    resolved = _race()
    assert sum(r for _, r in resolved) == RACE_RULES
    assert Alert.objects.filter(state="resolved").count() == RACE_RULES == Alert.objects.count()
    assert OutboxMessage.objects.filter(key__endswith=":resolved").count() == RACE_RULES


# --- rules changed by operators, and the schedule --------------------------------------------


@pytest.mark.django_db
def test_saving_and_deleting_a_rule_is_audited_and_deleting_resolves_its_alert(django_user_model):
    user = django_user_model.objects.create_user("otto")
    r = alerts.save_rule(AlertRule(name="stuck", metric=Metric.STUCK_ROWS, threshold=0, channel="email",
                                   target="ops@example.com"), actor="otto", user=user)
    assert r.created_by == user
    stuck("r1")
    alerts.evaluate()
    alerts.delete_rule(r, actor="otto", user=user)
    alert = Alert.objects.get()
    assert (alert.state, alert.resolved_reason, alert.rule, alert.rule_name) == ("resolved", "rule deleted", None, "stuck")
    assert OutboxMessage.objects.filter(key=f"idemdash:alert:{alert.pk}:resolved").exists()
    entries = list(AuditEntry.objects.order_by("id").values_list("action", "status_before", "status_after", "user"))
    assert entries == [("alert_rule.create", "", "enabled", user.pk), ("alert_rule.delete", "enabled", "deleted", user.pk)]


def test_the_alerts_schedule_is_declared_every_minute():
    (entry,) = [e for e in declared_schedules().schedules if e["name"] == "idemdash_dashboard.alerts"]
    assert (entry["func"], entry["schedule_type"], entry["minutes"]) == ("idemdash.dashboard.tasks.evaluate_alerts", "I", 1)


@pytest.mark.django_db
def test_the_scheduled_task_evaluates_and_reports():
    rule(Metric.STUCK_ROWS, 0)
    stuck("r1")
    report = evaluate_alerts()
    assert report["evaluated"] == 1 and len(report["fired"]) == 1


@pytest.mark.django_db
def test_the_scheduled_task_resolves_failure_groups_that_went_quiet():
    from idemdash.core import failures

    failures.record(failures.Failure("event", "stripe invoice.paid", "RuntimeError: ledger down"), unit_id=1,
                    now=timezone.now() - failures.QUIET - timedelta(minutes=1))
    failures.record(failures.Failure("event", "stripe invoice.paid", "KeyError: 'amount'"), unit_id=2, now=timezone.now())
    assert evaluate_alerts()["failure_groups_resolved"] == 1
    assert sorted(failures.FailureGroup.objects.values_list("state", flat=True)) == ["open", "resolved"]


@pytest.mark.django_db
def test_a_rule_on_fresh_key_retries_fires_once_a_request_runs_again_under_a_new_key():
    from receipts import store

    r = rule(Metric.FRESH_KEY_RETRIES, 0)
    store.claim("client:app", "k1", "email.send", {"to": "a"})
    store.claim("client:app", "k2", "email.send", {"to": "b"})  # another request: no retry
    quiet = alerts.evaluate()
    assert (quiet.fired, quiet.values) == ([], {r.name: 0.0})
    store.claim("client:app", "k3", "email.send", {"to": "a"})  # the first request under a new key: it ran again
    result = alerts.evaluate()
    alert = Alert.objects.get()
    assert result.fired == [alert.pk] and alert.value == 1.0
    assert "Fresh-key retries that ran again is 1 (> 0 over 1h)" in OutboxMessage.objects.get().payload["subject"]
