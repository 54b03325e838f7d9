from __future__ import annotations

import json
import time

import pytest
from django.http.request import HttpHeaders

from tests.webhooks.conftest import (
    SHOPIFY_SECRET,
    STANDARD_SECRET,
    STRIPE_SECRET,
    shopify_headers,
    standard_headers,
    stripe_event,
    stripe_headers,
)
from webhooks.verify import VerificationError, verify_delivery

BODY = json.dumps(stripe_event({"id": "pi_1", "object": "payment_intent"}, "payment_intent.succeeded", event_id="evt_1")).encode()
OLD_STRIPE = "whsec_old_secret_aaaaaaaaaaaa"


def headers(raw: dict[str, str]) -> HttpHeaders:
    return HttpHeaders({"HTTP_" + k.upper().replace("-", "_"): v for k, v in raw.items()})


def cause_of(provider: str, body: bytes, raw: dict[str, str], secrets: list[str], **kw) -> str:
    with pytest.raises(VerificationError) as info:
        verify_delivery(provider, body, headers(raw), secrets, **kw)
    assert STRIPE_SECRET not in str(info.value) and SHOPIFY_SECRET not in str(info.value)
    return info.value.cause


def test_a_stripe_delivery_is_verified_and_keyed_by_event_id():
    verified = verify_delivery("stripe", BODY, headers(stripe_headers(BODY, STRIPE_SECRET)), [STRIPE_SECRET])
    assert verified.dedupe_key == "evt_1"
    assert verified.event_type == "payment_intent.succeeded"
    assert verified.secret_index == 0


def test_a_connect_event_is_keyed_by_account_and_event_id():
    body = json.dumps(stripe_event({}, "charge.succeeded", event_id="evt_2", account="acct_9")).encode()
    verified = verify_delivery("stripe", body, headers(stripe_headers(body, STRIPE_SECRET)), [STRIPE_SECRET])
    assert verified.dedupe_key == "acct_9:evt_2"
    assert verified.account == "acct_9"


def test_each_active_secret_is_tried_so_a_rotation_loses_nothing():
    for secret, index in ((OLD_STRIPE, 1), (STRIPE_SECRET, 0)):
        verified = verify_delivery("stripe", BODY, headers(stripe_headers(BODY, secret)), [STRIPE_SECRET, OLD_STRIPE])
        assert verified.secret_index == index


@pytest.mark.parametrize(
    "raw, cause",
    [
        ({}, "missing_header"),
        ({"Stripe-Signature": "v1=abc"}, "malformed_header"),
        ({"Stripe-Signature": "t=notanumber,v1=abc"}, "malformed_header"),
        ({"Stripe-Signature": "t={now}"}, "malformed_header"),
        ({"Stripe-Signature": "t={now},v1=deadbeef"}, "no_matching_signature"),
    ],
)
def test_stripe_header_problems_have_their_own_cause(raw, cause):
    # The timestamp is taken when the test runs, not when it is collected: a slow suite
    # would otherwise make it stale and test the wrong cause.
    raw = {name: value.format(now=int(time.time())) for name, value in raw.items()}
    assert cause_of("stripe", BODY, raw, [STRIPE_SECRET]) == cause


def test_a_stripe_signature_older_than_the_tolerance_is_stale():
    raw = stripe_headers(BODY, STRIPE_SECRET, timestamp=int(time.time()) - 301)
    assert cause_of("stripe", BODY, raw, [STRIPE_SECRET], stripe_tolerance=300) == "stale_timestamp"


def test_a_stripe_signature_from_the_future_is_refused():
    raw = stripe_headers(BODY, STRIPE_SECRET, timestamp=int(time.time()) + 301)
    assert cause_of("stripe", BODY, raw, [STRIPE_SECRET], stripe_tolerance=300) == "future_timestamp"


def test_a_stripe_signature_by_another_secret_does_not_match():
    raw = stripe_headers(BODY, "whsec_someone_else_000000000")
    assert cause_of("stripe", BODY, raw, [STRIPE_SECRET]) == "no_matching_signature"


def test_a_signed_body_that_is_not_json_is_refused():
    body = b"{not json"
    assert cause_of("stripe", body, stripe_headers(body, STRIPE_SECRET), [STRIPE_SECRET]) == "invalid_json"


def test_a_stripe_event_without_id_is_refused():
    body = b'{"type": "x"}'
    assert cause_of("stripe", body, stripe_headers(body, STRIPE_SECRET), [STRIPE_SECRET]) == "missing_id"


def test_an_endpoint_without_active_secret_accepts_nothing():
    assert cause_of("stripe", BODY, stripe_headers(BODY, STRIPE_SECRET), []) == "no_active_secret"


def test_a_shopify_delivery_is_keyed_by_shop_and_event_id_and_keeps_its_webhook_id():
    body = b'{"id": 820982911946154508}'
    raw = shopify_headers(body, SHOPIFY_SECRET, webhook_id="wh-1", shop="Demo.myshopify.com", event_id="ev-1")
    verified = verify_delivery("shopify", body, headers(raw), [SHOPIFY_SECRET])
    assert (verified.dedupe_key, verified.delivery_id) == ("demo.myshopify.com:ev-1", "wh-1")
    assert verified.provider_event_id == "ev-1"
    assert verified.event_type == "orders/create"


def test_a_shopify_delivery_without_an_event_id_is_keyed_by_its_webhook_id():
    body = b'{"id": 1}'
    raw = {k: v for k, v in shopify_headers(body, SHOPIFY_SECRET, webhook_id="wh-2").items() if k != "X-Shopify-Event-Id"}
    verified = verify_delivery("shopify", body, headers(raw), [SHOPIFY_SECRET])
    assert (verified.dedupe_key, verified.delivery_id, verified.provider_event_id) == (
        "demo.myshopify.com:webhook:wh-2", "wh-2", "")


def test_a_shopify_webhook_id_with_control_characters_is_refused():
    body = b'{"id": 1}'
    raw = shopify_headers(body, SHOPIFY_SECRET, webhook_id="w-1\r\nX-Injected: 1", event_id="ev-3")
    assert cause_of("shopify", body, raw, [SHOPIFY_SECRET]) == "invalid_id"


def test_shopify_refusals_name_their_cause():
    body = b'{"id": 1}'
    good = shopify_headers(body, SHOPIFY_SECRET)
    assert cause_of("shopify", body, {}, [SHOPIFY_SECRET]) == "missing_header"
    assert cause_of("shopify", body, {**good, "X-Shopify-Hmac-Sha256": "AAAA"}, [SHOPIFY_SECRET]) == "no_matching_signature"
    assert cause_of("shopify", b'{"id": 2}', good, [SHOPIFY_SECRET]) == "no_matching_signature"
    no_id = {k: v for k, v in good.items() if k != "X-Shopify-Webhook-Id"}
    assert cause_of("shopify", body, no_id, [SHOPIFY_SECRET]) == "missing_header"
    bad_json = b"nope"
    assert cause_of("shopify", bad_json, shopify_headers(bad_json, SHOPIFY_SECRET), [SHOPIFY_SECRET]) == "invalid_json"


def test_a_standard_webhook_is_keyed_by_webhook_id():
    body = b'{"type": "invoice.paid", "data": {}}'
    raw = standard_headers(body, STANDARD_SECRET, msg_id="msg_1")
    verified = verify_delivery("standard", body, headers(raw), [STANDARD_SECRET])
    assert verified.dedupe_key == "msg_1"
    assert verified.event_type == "invoice.paid"


def test_standard_webhook_refusals_name_their_cause():
    body = b'{"type": "a"}'
    now = int(time.time())
    good = standard_headers(body, STANDARD_SECRET)
    assert cause_of("standard", body, {k: v for k, v in good.items() if k != "webhook-id"}, [STANDARD_SECRET]) == "missing_header"
    assert cause_of("standard", body, standard_headers(body, STANDARD_SECRET, timestamp=now - 301), [STANDARD_SECRET]) == "stale_timestamp"
    assert cause_of("standard", body, standard_headers(body, STANDARD_SECRET, timestamp=now + 301), [STANDARD_SECRET]) == "future_timestamp"
    assert cause_of("standard", body, {**good, "webhook-timestamp": "soon"}, [STANDARD_SECRET]) == "malformed_header"
    other = "whsec_" + "b3RoZXItc2VjcmV0LW90aGVyLXNlY3JldA=="
    assert cause_of("standard", body, standard_headers(body, other), [STANDARD_SECRET]) == "no_matching_signature"
    assert cause_of("standard", body, {**good, "webhook-signature": "garbage"}, [STANDARD_SECRET]) == "no_matching_signature"
