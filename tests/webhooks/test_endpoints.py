from __future__ import annotations

import pytest
from django.core.management import call_command

from idemdash.core.models import AuditEntry
from tests.webhooks.conftest import STRIPE_SECRET, deliver_stripe, make_endpoint, queued_event_ids, stripe_event
from webhooks import endpoints, processing
from webhooks.models import WebhookEndpoint, WebhookEvent, WebhookSecret

pytestmark = pytest.mark.django_db


def test_env_secrets_create_their_endpoints(settings):
    settings.STRIPE_WEBHOOK_SECRET = "whsec_from_env_0000000000"
    settings.STANDARD_WEBHOOK_SECRET = "whsec_c3RhbmRhcmQtc2VjcmV0LWZyb20tZW52"
    made = endpoints.ensure_env_endpoints()
    assert sorted(e.slug for e in made) == ["standard", "stripe"]
    stripe = WebhookEndpoint.objects.get(slug="stripe")
    assert stripe.provider == "stripe"
    assert list(stripe.secrets.values_list("secret", "from_env")) == [("whsec_from_env_0000000000", True)]


def test_making_env_endpoints_twice_changes_nothing(settings):
    settings.STRIPE_WEBHOOK_SECRET = "whsec_from_env_0000000000"
    endpoints.ensure_env_endpoints()
    endpoints.ensure_env_endpoints()
    assert WebhookEndpoint.objects.filter(slug="stripe").count() == 1
    assert WebhookSecret.objects.filter(endpoint__slug="stripe").count() == 1


def test_a_changed_env_secret_replaces_the_env_secret_only(settings):
    settings.STRIPE_WEBHOOK_SECRET = "whsec_from_env_0000000000"
    (endpoint,) = endpoints.ensure_env_endpoints()
    endpoint.secrets.create(secret="whsec_added_in_admin_00000")
    settings.STRIPE_WEBHOOK_SECRET = "whsec_rotated_env_1111111"
    endpoints.ensure_env_endpoints()
    assert set(endpoint.secrets.values_list("secret", flat=True)) == {"whsec_rotated_env_1111111", "whsec_added_in_admin_00000"}


def test_migrate_creates_the_env_endpoints(settings):
    settings.SHOPIFY_WEBHOOK_SECRET = "shopify-env-secret-0000000"
    call_command("migrate", verbosity=0)
    assert WebhookEndpoint.objects.get(slug="shopify").provider == "shopify"


def test_an_env_endpoint_is_served_with_no_manual_step(client, settings):
    settings.STRIPE_WEBHOOK_SECRET = "whsec_from_env_0000000000"
    response = deliver_stripe(client, "stripe", stripe_event({}, "a.b"), secret="whsec_from_env_0000000000")
    assert response.status_code == 200


def test_a_paused_endpoint_holds_events_until_it_is_resumed(client):
    endpoint = make_endpoint("shop", "stripe", STRIPE_SECRET)
    assert endpoints.pause(endpoint, actor="ops") is True
    assert endpoints.pause(endpoint, actor="ops") is False  # already paused
    deliver_stripe(client, "shop", stripe_event({}, "a.b"))
    deliver_stripe(client, "shop", stripe_event({}, "a.b"))
    assert set(WebhookEvent.objects.values_list("status", flat=True)) == {"held"}
    assert processing.sweep().enqueued == 0  # held events are not processed
    assert queued_event_ids() == []
    assert endpoints.resume(endpoint, actor="ops") == 2
    assert endpoints.resume(endpoint, actor="ops") is None  # not paused: nothing, no audit entry
    assert sorted(queued_event_ids()) == sorted(WebhookEvent.objects.values_list("pk", flat=True))
    assert set(WebhookEvent.objects.values_list("status", flat=True)) == {"received"}
    event = WebhookEvent.objects.first()
    assert processing.process_event(event.pk) == "ignored"
    actions = list(AuditEntry.objects.order_by("id").values_list("action", flat=True))
    assert actions == ["webhook_endpoint.pause", "webhook_endpoint.resume"]


def test_pausing_holds_the_events_already_waiting_for_a_worker_and_resuming_releases_them(client):
    endpoint = make_endpoint("shop", "stripe", STRIPE_SECRET)
    deliver_stripe(client, "shop", stripe_event({}, "a.b"))
    deliver_stripe(client, "shop", stripe_event({}, "c.d"))
    first, second = WebhookEvent.objects.order_by("id")
    WebhookEvent.objects.filter(pk=second.pk).update(status="retry", attempts=1)  # waiting for a retry
    assert endpoints.pause(endpoint, actor="ops", note="their API is down") is True
    assert set(WebhookEvent.objects.values_list("status", flat=True)) == {"held"}
    assert processing.process_event(first.pk) == "not_claimed"
    held = endpoints.backlog(endpoint)
    assert (held.held, held.oldest) == (2, first.received_at)
    assert AuditEntry.objects.get(action="webhook_endpoint.pause").detail == "2 waiting events held; their API is down"
    assert endpoints.resume(endpoint, actor="ops") == 2
    assert WebhookEvent.objects.get(pk=second.pk).attempts == 1  # its attempts so far are kept
    assert processing.process_event(first.pk) == "ignored"


def test_an_event_stored_just_before_its_endpoint_was_paused_is_not_claimed_and_the_sweep_holds_it(client):
    # The delivery read the endpoint before the pause committed, so it stored the event as
    # received and enqueued its task: the claim still refuses it.
    endpoint = make_endpoint("shop", "stripe", STRIPE_SECRET)
    deliver_stripe(client, "shop", stripe_event({}, "a.b"))
    event = WebhookEvent.objects.get()
    WebhookEndpoint.objects.filter(pk=endpoint.pk).update(paused=True)  # as if the pause landed after
    assert event.status == "received"
    assert processing.process_event(event.pk) == "not_claimed"
    assert processing.process_event_by_key(endpoint.pk, event.dedupe_key) == "not_claimed"
    assert processing.sweep().held == 1
    event.refresh_from_db()
    assert (event.status, event.attempts) == ("held", 0)


def test_receiving_reads_the_endpoint_and_its_active_secrets_newest_first_in_one_query(django_assert_num_queries):
    endpoint = make_endpoint("shop", "stripe", "whsec_oldest_000000000000", "whsec_revoked_00000000000")
    endpoint.secrets.filter(secret="whsec_revoked_00000000000").update(active=False)
    newest = endpoint.secrets.create(secret=STRIPE_SECRET)
    with django_assert_num_queries(1):
        found, secrets = endpoints.receiving("shop")
        assert (found.pk, found.provider, found.paused) == (endpoint.pk, "stripe", False)
    oldest = endpoint.secrets.get(secret="whsec_oldest_000000000000")
    assert secrets == [(newest.pk, STRIPE_SECRET), (oldest.pk, oldest.secret)]
    assert found.description == endpoint.description  # the other fields load on demand


def test_receiving_an_endpoint_without_secrets_or_an_unknown_slug():
    make_endpoint("bare", "shopify", paused=True)
    found, secrets = endpoints.receiving("bare")
    assert (found.provider, found.paused, secrets) == ("shopify", True, [])
    assert endpoints.receiving("nope") is None


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.django_db(transaction=True)
def test_a_running_worker_runs_nothing_of_a_paused_endpoint_and_everything_once_after_resume(client, tmp_path):
    # A real `manage.py qcluster` with its ticks (the sweep every few seconds). One event was
    # stored before the pause, its task already queued; five arrive while paused, each
    # answered 200. None runs until the resume; then each runs once (no handler for the
    # type: ignored, with one attempt).
    from django.db import connection
    from django_q.models import OrmQ

    from tests.qcluster import TICK, kill_process, processed, signal_stop, start_qcluster
    from tests.waits import until

    endpoint = make_endpoint("shop", "stripe", STRIPE_SECRET)
    assert deliver_stripe(client, "shop", stripe_event({"n": 0}, "a.b")).status_code == 200
    endpoints.pause(endpoint, actor="ops")
    for n in range(1, 6):
        response = deliver_stripe(client, "shop", stripe_event({"n": n}, "a.b"))
        assert response.status_code == 200 and response.json()["status"] == "held"
    assert OrmQ.objects.count() == 1  # the first event's task, queued before the pause
    qlog = tmp_path / "qcluster.log"
    cluster = start_qcluster(qlog)
    try:
        until(lambda: not OrmQ.objects.exists(), "the queued task taken", log=qlog)
        until(lambda: processed(qlog, "webhooks.tasks.process_event_by_key") == 1, "the queued task run", log=qlog)
        ticks = processed(qlog, TICK)
        until(lambda: processed(qlog, TICK) > ticks, "a tick (its sweep) after it", log=qlog)
        assert set(WebhookEvent.objects.values_list("status", "attempts")) == {("held", 0)}
        assert endpoints.resume(endpoint, actor="ops") == 6
        until(lambda: set(WebhookEvent.objects.values_list("status", flat=True)) == {"ignored"},
              "the held events run", log=qlog)
        assert signal_stop(cluster, group=True, within=15) is not None
    finally:
        kill_process(cluster)
        connection.close()
    assert set(WebhookEvent.objects.values_list("attempts", flat=True)) == {1}
