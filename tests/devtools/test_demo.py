from __future__ import annotations

import json

import pytest
from django.test import override_settings

from idemdash.devtools.models import DemoSwitch
from idemdash.devtools import demo
from idemdash.core.models import AuditEntry
from tests.webhooks.conftest import SHOPIFY_SECRET, deliver, make_endpoint, shopify_headers
from webhooks import processing
from webhooks.models import WebhookEvent

pytestmark = pytest.mark.django_db


def deliver_refund(client) -> WebhookEvent:
    body = json.dumps({"id": 8301, "order_id": 8201, "transactions": [{"amount": "19.00"}]}).encode()
    headers = shopify_headers(body, SHOPIFY_SECRET, topic="refunds/create")
    assert deliver(client, "shop", body, headers).status_code == 200
    return WebhookEvent.objects.get(event_type="refunds/create")


def process(event: WebhookEvent) -> WebhookEvent:
    processing.process_event(event.pk)
    event.refresh_from_db()
    return event


# --- the staged bug -----------------------------------------------------------------------------


@override_settings(WEBHOOKS_MAX_ATTEMPTS=2, WEBHOOKS_BACKOFF_BASE=1)
def test_the_refund_handler_fails_until_the_switch_is_fixed_then_a_reprocess_completes(client, time_machine):
    make_endpoint("shop", "shopify", SHOPIFY_SECRET)
    demo.setup()
    event = deliver_refund(client)

    assert process(event).status == "retry"
    assert "demo outage 'refunds'" in event.last_error and "/admin/devtools/demoswitch/" in event.last_error
    time_machine.move_to(event.next_attempt_at, tick=False)  # its backoff is over
    assert process(event).status == "dead"

    switch = DemoSwitch.objects.get(name=demo.REFUNDS)
    assert demo.set_failing(switch, False, actor="admin:ops") is True
    assert demo.set_failing(switch, False, actor="admin:ops") is False  # already fixed: nothing to do
    processing.reprocess(event, actor="admin:ops")
    assert process(event).status == "completed"
    assert AuditEntry.objects.filter(action="demo_switch.fix", status_before="failing", status_after="fixed").count() == 1


def test_without_the_demo_setup_the_refund_handler_succeeds(client):
    make_endpoint("shop", "shopify", SHOPIFY_SECRET)
    assert process(deliver_refund(client)).status == "completed"


# --- the setup -------------------------------------------------------------------------------


def test_setup_arms_the_outage_once():
    assert demo.setup() == ["refunds"]
    assert demo.setup() == []  # still failing: nothing armed again


def test_setup_arms_a_fixed_switch_again_so_each_demo_starts_broken():
    demo.setup()
    switch = DemoSwitch.objects.get()
    demo.set_failing(switch, False, actor="admin:ops")
    assert not demo.failing(demo.REFUNDS)

    assert demo.setup() == ["refunds"]
    assert demo.failing(demo.REFUNDS)
    assert DemoSwitch.objects.count() == 1


# --- the preflight's case: a refund handled before the bug, its confirmation sent ------------


def test_stage_sent_refund_leaves_a_completed_refund_whose_confirmation_was_sent_once(settings, mailoutbox):
    from receipts.outbox.models import OutboxMessage
    from receipts.references import side_effects_on_record

    settings.SHOPIFY_WEBHOOK_SECRET = SHOPIFY_SECRET
    demo.setup()  # the bug is armed first, as demo_stage does
    staged = demo.stage_sent_refund()

    event = WebhookEvent.objects.get(pk=staged.event_id)
    assert (staged.created, event.event_type, event.status) == (True, "refunds/create", "completed")
    assert list(event.references.values_list("kind", "value")) == [("shopify.order", "8200000000001")]
    message = OutboxMessage.objects.get(pk=staged.message_id)
    assert (message.status, message.action, message.key) == (
        "sent", "email.send", "refund-confirmation-idemdash-demo.myshopify.com-8300000000001")
    assert [m.subject for m in mailoutbox] == ["Your refund for order 8200000000001"]
    assert list(message.references.values_list("kind", "value")) == [("shopify.order", "8200000000001")]
    # What the reprocess confirmation will show: that email, sent.
    assert side_effects_on_record(event).sent == [message]
    # Staging ran the handler "before the bug" in its own context only: the bug is still on.
    assert demo.failing(demo.REFUNDS)

    again = demo.stage_sent_refund()
    assert (again.created, again.event_id, again.message_id) == (False, event.pk, message.pk)
    assert OutboxMessage.objects.count() == 1 and len(mailoutbox) == 1


def test_reprocessing_the_staged_refund_runs_its_handler_again_and_the_refunds_key_absorbs_the_email(settings, mailoutbox):
    """What the preflight's "downstream key" means here: the handler enqueues under the refund's
    key, so a reprocess finds the sent message and the customer gets no second email."""
    from receipts.outbox.drain import drain
    from receipts.outbox.models import OutboxMessage

    settings.SHOPIFY_WEBHOOK_SECRET = SHOPIFY_SECRET
    staged = demo.stage_sent_refund()  # never set up: no switch, the handler succeeds
    event = WebhookEvent.objects.get(pk=staged.event_id)

    processing.reprocess(event, actor="admin:ops")
    assert process(event).status == "completed"
    drain()
    assert OutboxMessage.objects.count() == 1 and len(mailoutbox) == 1


def test_without_a_shopify_endpoint_nothing_is_staged(settings):
    settings.SHOPIFY_WEBHOOK_SECRET = ""
    assert demo.stage_sent_refund() is None
    assert not WebhookEvent.objects.exists()
