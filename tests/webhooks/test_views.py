from __future__ import annotations

import json

import pytest
from django.db import connection

from tests.webhooks.conftest import (
    LOCAL_OBJECTS,
    SHOPIFY_SECRET,
    STANDARD_SECRET,
    STRIPE_SECRET,
    body_of,
    deliver,
    deliver_stripe,
    make_endpoint,
    queued_event_ids,
    shopify_headers,
    standard_headers,
    stripe_event,
    stripe_headers,
)
from webhooks.models import RejectedDelivery, WebhookDelivery, WebhookEvent

pytestmark = pytest.mark.django_db


def problem_of(response) -> dict:
    assert response["Content-Type"] == "application/problem+json"
    return json.loads(response.content)


def test_a_new_stripe_event_is_stored_once_and_answered_200(client):
    make_endpoint("shop", "stripe", STRIPE_SECRET)
    payload = stripe_event(LOCAL_OBJECTS["payment_intent"], "payment_intent.succeeded", event_id="evt_local_1")
    response = deliver_stripe(client, "shop", payload)
    assert response.status_code == 200
    event = WebhookEvent.objects.get()
    assert response.json() == {"received": True, "event": event.pk, "status": "received"}
    assert event.dedupe_key == "evt_local_1" and event.status == "received"
    assert event.payload == payload
    # Its task is queued in the delivery's own transaction (the ORM broker's table), once.
    assert queued_event_ids() == [event.pk]
    assert deliver_stripe(client, "shop", payload).json()["duplicate"] is True
    assert queued_event_ids() == [event.pk]


def test_a_redelivery_is_a_duplicate_counted_on_the_event(client):
    make_endpoint("shop", "stripe", STRIPE_SECRET)
    payload = stripe_event(LOCAL_OBJECTS["payment_intent"], "payment_intent.succeeded", event_id="evt_dup")
    first = deliver_stripe(client, "shop", payload)
    second = deliver_stripe(client, "shop", payload)
    third = deliver_stripe(client, "shop", payload)
    assert first.status_code == second.status_code == third.status_code == 200
    assert third.json()["duplicate"] is True and third.json()["deliveries"] == 3
    event = WebhookEvent.objects.get()
    assert event.delivery_count == 3 and not event.payload_mismatch
    assert list(WebhookDelivery.objects.order_by("id").values_list("duplicate", flat=True)) == [False, True, True]


def test_a_duplicate_with_a_different_payload_is_flagged(client):
    make_endpoint("shop", "stripe", STRIPE_SECRET)
    payload = stripe_event(LOCAL_OBJECTS["payment_intent"], "payment_intent.succeeded", event_id="evt_changed")
    deliver_stripe(client, "shop", payload)
    changed = {**payload, "data": {"object": {**LOCAL_OBJECTS["payment_intent"], "amount": 1}}}
    response = deliver_stripe(client, "shop", changed)
    assert response.json()["payload_matches"] is False
    event = WebhookEvent.objects.get()
    assert event.payload_mismatch and event.payload == payload  # the first payload is kept
    assert not WebhookDelivery.objects.get(duplicate=True).payload_matches


def test_the_same_json_with_other_whitespace_is_not_a_different_payload(client):
    make_endpoint("shop", "stripe", STRIPE_SECRET)
    payload = stripe_event({"id": "pi_x"}, "payment_intent.succeeded", event_id="evt_ws")
    deliver_stripe(client, "shop", json.dumps(payload).encode())
    deliver_stripe(client, "shop", json.dumps(payload, indent=2).encode())
    assert not WebhookEvent.objects.get().payload_mismatch


def test_an_unknown_slug_is_404(client):
    response = deliver_stripe(client, "nowhere", stripe_event({}, "x"))
    assert response.status_code == 404
    assert problem_of(response)["type"] == "urn:idemdash:problem:webhook-endpoint-not-found"


def test_other_methods_are_405(client):
    make_endpoint("shop", "stripe", STRIPE_SECRET)
    for method in (client.get, client.put, client.delete):
        response = method("/webhooks/shop/")
        assert response.status_code == 405 and response["Allow"] == "POST"
        problem_of(response)


def test_a_body_over_the_limit_is_413_and_not_stored(client, settings):
    make_endpoint("shop", "stripe", STRIPE_SECRET)
    limit = settings.WEBHOOKS_MAX_BODY_BYTES
    assert limit == 1024 * 1024
    payload = stripe_event({"pad": "x" * limit}, "x.y")
    response = deliver_stripe(client, "shop", payload)
    assert response.status_code == 413
    problem_of(response)
    assert not WebhookEvent.objects.exists()
    rejection = RejectedDelivery.objects.get()
    assert rejection.cause == "body_too_large" and rejection.body_excerpt == ""
    assert rejection.body_size > limit


def test_a_body_at_the_limit_is_accepted(client, settings):
    make_endpoint("shop", "stripe", STRIPE_SECRET)
    payload = stripe_event({"pad": ""}, "x.y", event_id="evt_big")
    pad = settings.WEBHOOKS_MAX_BODY_BYTES - len(body_of(payload))
    payload["data"]["object"]["pad"] = "x" * pad
    assert len(body_of(payload)) == settings.WEBHOOKS_MAX_BODY_BYTES
    assert deliver_stripe(client, "shop", payload).status_code == 200


def test_a_bad_signature_is_400_with_a_rejection_record_and_no_event(client):
    make_endpoint("shop", "stripe", STRIPE_SECRET)
    payload = stripe_event({"secret_data": "y" * 5000}, "x.y")
    response = deliver_stripe(client, "shop", payload, secret="whsec_wrong_wrong_wrong_wrong")
    assert response.status_code == 400
    body = problem_of(response)
    assert body["cause"] == "no_matching_signature"
    assert STRIPE_SECRET not in response.content.decode()
    assert not WebhookEvent.objects.exists()
    rejection = RejectedDelivery.objects.get()
    assert rejection.cause == "no_matching_signature"
    assert len(rejection.body_excerpt) == 256 and rejection.body_size == len(body_of(payload))


@pytest.mark.parametrize(
    "provider, secret, make_headers, cause",
    [
        ("stripe", STRIPE_SECRET, lambda body: {}, "missing_header"),
        ("stripe", STRIPE_SECRET, lambda body: stripe_headers(body, STRIPE_SECRET, timestamp=1), "stale_timestamp"),
        ("stripe", STRIPE_SECRET, lambda body: stripe_headers(body, STRIPE_SECRET, timestamp=4102444800), "future_timestamp"),
        ("shopify", SHOPIFY_SECRET, lambda body: shopify_headers(body, "other-secret-000000"), "no_matching_signature"),
        ("standard", STANDARD_SECRET, lambda body: standard_headers(body, STANDARD_SECRET, timestamp=1), "stale_timestamp"),
    ],
)
def test_every_rejection_is_recorded_with_its_cause(client, provider, secret, make_headers, cause):
    make_endpoint("ep", provider, secret)
    body = b'{"id": "evt_r", "type": "t"}'
    response = deliver(client, "ep", body, make_headers(body))
    assert response.status_code == 400 and problem_of(response)["cause"] == cause
    assert RejectedDelivery.objects.get().cause == cause


def test_unparseable_json_is_rejected_as_such(client):
    make_endpoint("ep", "shopify", SHOPIFY_SECRET)
    body = b"<xml/>"
    response = deliver(client, "ep", body, shopify_headers(body, SHOPIFY_SECRET))
    assert response.status_code == 400
    assert RejectedDelivery.objects.get().cause == "invalid_json"


def test_rejected_deliveries_are_capped(client, settings):
    settings.WEBHOOKS_REJECTED_MAX_ROWS = 5
    make_endpoint("shop", "stripe", STRIPE_SECRET)
    for n in range(12):
        deliver(client, "shop", f'{{"n": {n}}}'.encode(), {})
    kept = list(RejectedDelivery.objects.order_by("id").values_list("body_excerpt", flat=True))
    assert kept == [f'{{"n": {n}}}' for n in range(7, 12)]


def test_both_secrets_are_accepted_while_both_are_active_and_the_old_one_stops_when_deactivated(client):
    endpoint = make_endpoint("shop", "stripe", "whsec_old_old_old_old_old")
    endpoint.secrets.create(secret=STRIPE_SECRET)
    old = deliver_stripe(client, "shop", stripe_event({}, "a.b"), secret="whsec_old_old_old_old_old")
    new = deliver_stripe(client, "shop", stripe_event({}, "a.b"), secret=STRIPE_SECRET)
    assert old.status_code == new.status_code == 200
    endpoint.secrets.filter(secret="whsec_old_old_old_old_old").update(active=False)
    late = deliver_stripe(client, "shop", stripe_event({}, "a.b"), secret="whsec_old_old_old_old_old")
    assert late.status_code == 400
    assert WebhookEvent.objects.count() == 2
    used = set(WebhookDelivery.objects.values_list("secret__secret", flat=True))
    assert used == {"whsec_old_old_old_old_old", STRIPE_SECRET}


def test_a_secret_rotated_in_place_is_honoured_on_the_very_next_delivery(client):
    """How the environment secret rotates: the same row gets the new value. Nothing in the
    process may still hold the old one."""
    endpoint = make_endpoint("shop", "stripe", "whsec_before_rotation_0000")
    assert deliver_stripe(client, "shop", stripe_event({}, "a.b"), secret="whsec_before_rotation_0000").status_code == 200
    endpoint.secrets.update(secret=STRIPE_SECRET)
    stale = deliver_stripe(client, "shop", stripe_event({}, "a.b"), secret="whsec_before_rotation_0000")
    assert problem_of(stale)["cause"] == "no_matching_signature"
    assert deliver_stripe(client, "shop", stripe_event({}, "a.b"), secret=STRIPE_SECRET).status_code == 200


def test_the_last_secret_revoked_leaves_no_secret_on_the_very_next_delivery(client):
    endpoint = make_endpoint("shop", "stripe", STRIPE_SECRET)
    assert deliver_stripe(client, "shop", stripe_event({}, "a.b")).status_code == 200
    endpoint.secrets.update(active=False)
    response = deliver_stripe(client, "shop", stripe_event({}, "a.b"))
    assert problem_of(response)["cause"] == "no_active_secret"
    assert WebhookEvent.objects.count() == 1


def test_pausing_and_resuming_take_effect_on_the_very_next_delivery(client):
    endpoint = make_endpoint("shop", "stripe", STRIPE_SECRET)
    assert deliver_stripe(client, "shop", stripe_event({}, "a.b")).json()["status"] == "received"
    endpoint.__class__.objects.filter(pk=endpoint.pk).update(paused=True)
    assert deliver_stripe(client, "shop", stripe_event({}, "a.b")).json()["status"] == "held"
    endpoint.__class__.objects.filter(pk=endpoint.pk).update(paused=False)
    assert deliver_stripe(client, "shop", stripe_event({}, "a.b")).json()["status"] == "received"
    assert len(queued_event_ids()) == 2


@pytest.mark.postgres
def test_on_postgresql_a_delivery_costs_two_statements(client, django_assert_num_queries):
    """The endpoint with its secrets, then the store (event, delivery and task at once)."""
    make_endpoint("shop", "stripe", STRIPE_SECRET)
    payload = stripe_event({}, "a.b")
    with django_assert_num_queries(2 + 2):  # the savepoint a test's transaction adds
        assert deliver_stripe(client, "shop", payload).json()["status"] == "received"
    with django_assert_num_queries(2 + 2):
        assert deliver_stripe(client, "shop", payload).json()["duplicate"] is True


def test_a_paused_endpoint_stores_deliveries_as_held_and_answers_200(client):
    make_endpoint("shop", "stripe", STRIPE_SECRET, paused=True)
    response = deliver_stripe(client, "shop", stripe_event({}, "a.b"))
    assert response.status_code == 200
    assert WebhookEvent.objects.get().status == "held"
    assert queued_event_ids() == []  # nothing enqueued while paused


def test_shopify_deliveries_are_deduplicated_by_shop_and_event_id(client):
    make_endpoint("store", "shopify", SHOPIFY_SECRET)
    body = b'{"id": 450789469, "name": "#1001", "total_price": "10.00", "currency": "EUR"}'
    raw = shopify_headers(body, SHOPIFY_SECRET, webhook_id="b54557e4", event_id="98880550")
    assert deliver(client, "store", body, raw).status_code == 200
    assert deliver(client, "store", body, raw).json()["duplicate"] is True  # Shopify's retry
    # A second subscription to the topic: the same event under another webhook id.
    second = shopify_headers(body, SHOPIFY_SECRET, webhook_id="c7f0e2a1", event_id="98880550")
    assert deliver(client, "store", body, second).json()["duplicate"] is True
    other_shop = shopify_headers(body, SHOPIFY_SECRET, webhook_id="b54557e4", event_id="98880550",
                                 shop="other.myshopify.com")
    assert deliver(client, "store", body, other_shop).json()["received"] is True
    event = WebhookEvent.objects.get(account="demo.myshopify.com")
    assert (event.provider_event_id, event.event_type, event.delivery_count) == ("98880550", "orders/create", 3)
    assert list(event.deliveries.order_by("id").values_list("delivery_id", "duplicate")) == [
        ("b54557e4", False), ("b54557e4", True), ("c7f0e2a1", True),
    ]


def test_standard_webhooks_are_deduplicated_by_webhook_id(client):
    make_endpoint("std", "standard", STANDARD_SECRET)
    body = b'{"type": "user.created", "data": {"id": 1}}'
    first = deliver(client, "std", body, standard_headers(body, STANDARD_SECRET, msg_id="msg_a"))
    second = deliver(client, "std", body, standard_headers(body, STANDARD_SECRET, msg_id="msg_a"))
    assert first.json()["received"] and second.json()["duplicate"]
    assert WebhookEvent.objects.get().event_type == "user.created"


def test_real_stripe_objects_are_received_through_the_endpoint(client, fixtures3):
    make_endpoint("shop", "stripe", STRIPE_SECRET)
    for kind, event_type in [
        ("checkout.session", "checkout.session.completed"),
        ("payment_intent", "payment_intent.succeeded"),
        ("charge", "charge.succeeded"),
        ("invoice", "invoice.paid"),
        ("subscription", "customer.subscription.created"),
    ]:
        payload = stripe_event(fixtures3[kind], event_type)
        assert deliver_stripe(client, "shop", payload).status_code == 200
        assert deliver_stripe(client, "shop", payload).json()["duplicate"] is True
    assert WebhookEvent.objects.count() == 5
    assert set(WebhookEvent.objects.values_list("delivery_count", flat=True)) == {2}


def test_the_stripe_sample_event_envelope_is_received_as_is(client, fixtures3):
    make_endpoint("shop", "stripe", STRIPE_SECRET)
    sample = fixtures3["event"]
    assert deliver_stripe(client, "shop", sample).status_code == 200
    assert WebhookEvent.objects.get().dedupe_key == sample["id"]


def test_env_secret_creates_its_endpoint_on_the_first_request(client, settings):
    settings.SHOPIFY_WEBHOOK_SECRET = "env-shopify-secret-123456"
    body = b'{"id": 1}'
    response = deliver(client, "shopify", body, shopify_headers(body, "env-shopify-secret-123456"))
    assert response.status_code == 200


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_delivery_that_cannot_be_stored_gets_503_never_2xx(client):
    """The database connection dies in the middle of the insert (a trigger terminates our
    own backend), exactly as a database crash would."""
    make_endpoint("shop", "stripe", STRIPE_SECRET)
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE FUNCTION idemdash_test_die() RETURNS trigger AS $$ "
            "BEGIN PERFORM pg_terminate_backend(pg_backend_pid()); RETURN NEW; END $$ LANGUAGE plpgsql"
        )
        cursor.execute(
            "CREATE TRIGGER idemdash_test_die BEFORE INSERT ON webhooks_webhookevent "
            "FOR EACH ROW EXECUTE FUNCTION idemdash_test_die()"
        )
    try:
        response = deliver_stripe(client, "shop", stripe_event({}, "a.b"))
        assert response.status_code == 503
        assert response["Retry-After"] == "30"
        assert problem_of(response)["type"] == "urn:idemdash:problem:database-unavailable"
    finally:
        connection.close()
        with connection.cursor() as cursor:
            cursor.execute("DROP TRIGGER idemdash_test_die ON webhooks_webhookevent")
            cursor.execute("DROP FUNCTION idemdash_test_die()")
    assert not WebhookEvent.objects.exists()
    # and once the database is back, the provider's retry is stored
    assert deliver_stripe(client, "shop", stripe_event({}, "a.b")).status_code == 200


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_an_unreachable_database_gets_503(client, settings):
    make_endpoint("shop", "stripe", STRIPE_SECRET)
    real_port = connection.settings_dict["PORT"]
    connection.close()
    connection.settings_dict["PORT"] = "1"  # nothing listens there
    try:
        response = deliver_stripe(client, "shop", stripe_event({}, "a.b"))
    finally:
        connection.close()
        connection.settings_dict["PORT"] = real_port
    assert response.status_code == 503
    assert not WebhookEvent.objects.exists()


def test_an_overlong_event_id_is_rejected_not_a_500(client):
    make_endpoint("std", "standard", STANDARD_SECRET)
    body = b'{"type": "a"}'
    response = deliver(client, "std", body, standard_headers(body, STANDARD_SECRET, msg_id="m" * 600))
    assert response.status_code == 400 and problem_of(response)["cause"] == "invalid_id"
    assert not WebhookEvent.objects.exists()


def test_a_payload_the_database_cannot_store_is_rejected_not_a_500(client, on_postgres):
    make_endpoint("shop", "stripe", STRIPE_SECRET)
    response = deliver_stripe(client, "shop", stripe_event({"name": "nul\u0000byte"}, "a.b"))
    if on_postgres:  # jsonb refuses \u0000; SQLite stores it
        assert response.status_code == 400 and problem_of(response)["cause"] == "unstorable_payload"
        assert RejectedDelivery.objects.get().cause == "unstorable_payload"
        assert not WebhookEvent.objects.exists()
    else:
        assert response.status_code == 200


def test_no_secret_reaches_a_log_line(client, caplog, settings):
    caplog.set_level("DEBUG")
    settings.STRIPE_WEBHOOK_SECRET = "whsec_env_secret_never_logged"
    make_endpoint("shop", "stripe", STRIPE_SECRET)
    deliver_stripe(client, "shop", stripe_event({}, "a.b"))
    deliver_stripe(client, "shop", stripe_event({}, "a.b"), secret="whsec_wrong_wrong_wrong_00")
    deliver_stripe(client, "stripe", stripe_event({}, "a.b"), secret="whsec_env_secret_never_logged")
    deliver(client, "shop", b"{}", {})
    assert caplog.records  # the requests were logged (django.request, django.db) ...
    assert STRIPE_SECRET not in caplog.text and "whsec_env_secret_never_logged" not in caplog.text
