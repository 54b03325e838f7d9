"""Builders for webhook tests: endpoints, and deliveries signed the way each provider signs."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import stripe
from django.test import Client
from standardwebhooks.webhooks import Webhook as StandardWebhook

from idemdash.devtools.simulator import FIXTURES, stripe_event  # noqa: F401 (stripe_event re-exported for the webhook tests)
from webhooks import handlers
from webhooks.models import WebhookEndpoint, WebhookEvent, WebhookSecret

STRIPE_SECRET = "whsec_test_stripe_0123456789abcdef"
SHOPIFY_SECRET = "shpss_test_shopify_0123456789abcdef"
STANDARD_SECRET = "whsec_" + base64.b64encode(b"standard-webhooks-test-secret-32b").decode()

# The demo's small Stripe objects, the ones the simulator sends.
LOCAL_OBJECTS = json.loads((FIXTURES / "stripe_objects.json").read_text())
FIXTURES3 = Path(__file__).resolve().parents[2] / ".." / "shared" / "fixtures" / "stripe" / "fixtures3.json"


def make_endpoint(slug: str, provider: str, *secrets: str, paused: bool = False) -> WebhookEndpoint:
    endpoint = WebhookEndpoint.objects.create(slug=slug, provider=provider, paused=paused)
    for secret in secrets:
        WebhookSecret.objects.create(endpoint=endpoint, secret=secret)
    return endpoint


def body_of(payload: Any) -> bytes:
    return payload if isinstance(payload, bytes) else json.dumps(payload).encode()


def stripe_headers(body: bytes, secret: str, timestamp: int | None = None) -> dict[str, str]:
    header = stripe.WebhookSignature.generate_signature_header(body.decode(), secret, timestamp=timestamp)
    return {"Stripe-Signature": header}


def shopify_headers(
    body: bytes, secret: str, *, webhook_id: str | None = None, topic: str = "orders/create",
    shop: str = "demo.myshopify.com", event_id: str | None = None,
) -> dict[str, str]:
    """A signed Shopify delivery's headers. Shopify's retry of a webhook keeps both its ids, so
    by default one webhook id stands for one event id."""
    digest = base64.b64encode(hmac.new(secret.encode(), body, hashlib.sha256).digest()).decode()
    webhook_id = webhook_id or str(uuid.uuid4())
    return {
        "X-Shopify-Hmac-Sha256": digest,
        "X-Shopify-Webhook-Id": webhook_id,
        "X-Shopify-Topic": topic,
        "X-Shopify-Shop-Domain": shop,
        "X-Shopify-Event-Id": event_id or f"event-of-{webhook_id}",
    }


def standard_headers(body: bytes, secret: str, *, msg_id: str | None = None, timestamp: int | None = None) -> dict[str, str]:
    from datetime import datetime, timezone

    msg_id = msg_id or f"msg_{uuid.uuid4().hex}"
    ts = int(time.time()) if timestamp is None else timestamp
    signature = StandardWebhook(secret).sign(msg_id, datetime.fromtimestamp(ts, tz=timezone.utc), body.decode())
    return {"webhook-id": msg_id, "webhook-timestamp": str(ts), "webhook-signature": signature}


def deliver(client: Client, slug: str, body: bytes, headers: dict[str, str]):
    return client.post(f"/webhooks/{slug}/", data=body, content_type="application/json", headers=headers)


def deliver_stripe(client: Client, slug: str, payload: Any, secret: str = STRIPE_SECRET, **kw: Any):
    body = body_of(payload)
    return deliver(client, slug, body, stripe_headers(body, secret, **kw))


@pytest.fixture(autouse=True)
def _no_env_secrets(settings):
    """A developer's own *_WEBHOOK_SECRET must not leak into the tests."""
    settings.STRIPE_WEBHOOK_SECRET = settings.SHOPIFY_WEBHOOK_SECRET = settings.STANDARD_WEBHOOK_SECRET = ""


@pytest.fixture
def registry():
    """Register handlers for one test only."""
    added: list[tuple[str, str]] = []

    def register(provider: str, event_type: str, func):
        handlers.webhook_handler(provider, event_type)(func)
        added.append((provider, event_type))
        return func

    yield register
    for key in added:
        handlers.unregister(*key)


@pytest.fixture
def fixtures3() -> dict[str, Any]:
    if not FIXTURES3.exists():
        pytest.skip("../shared/fixtures is not beside this checkout")
    return json.loads(FIXTURES3.read_text())["resources"]


def queued_event_ids() -> list[int]:
    """The events whose processing task is in django-q2's ORM queue, oldest first."""
    from django_q.models import OrmQ

    from webhooks import processing

    def event_id(task: dict) -> int:
        if task["func"] == processing.TASK_BY_KEY:  # written with its event, named by its key
            endpoint_id, dedupe_key = task["args"]
            return WebhookEvent.objects.get(endpoint_id=endpoint_id, dedupe_key=dedupe_key).pk
        return task["args"][0]

    tasks = (q.task for q in OrmQ.objects.order_by("id"))
    return [event_id(task) for task in tasks if task.get("func") in (processing.TASK, processing.TASK_BY_KEY)]
