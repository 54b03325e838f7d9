"""Will retrying help? The single and bulk confirmations warn, before the click, on a last
failure that no retry changes (idemdash/core/actions.py:Kind.lasting, defined by each kind's
domain module): a 4xx other than 408/409/425/429, an unregistered outbox action, an event
type with no handler."""

from __future__ import annotations

import pytest

from receipts import store as receipt_store
from receipts.models import Receipt
from receipts.outbox import store
from receipts.outbox.models import OutboxMessage
from tests.dashboard.build import outbox_message, webhook_event
from webhooks import processing
from webhooks.handlers import unregister, webhook_handler
from webhooks.models import WebhookEvent

pytestmark = pytest.mark.django_db


def dead_with(key: str, status_code: int | None) -> OutboxMessage:
    message = outbox_message(key, "dead", action="http.post")
    OutboxMessage.objects.filter(pk=message.pk).update(last_status_code=status_code)
    return OutboxMessage.objects.get(pk=message.pk)


def test_send_again_warns_that_a_permanent_403_will_not_go_away(operator_client):
    m = dead_with("m403", 403)
    html = operator_client.get(f"/outbox/{m.pk}/send-again/").content.decode()
    assert 'data-role="lasting-failure"' in html
    assert "Retrying will not help:" in html and "refused with HTTP 403" in html
    assert 'class="button danger"' in html


@pytest.mark.parametrize("code", [408, 409, 425, 429, 500, 503, None])
def test_send_again_does_not_warn_after_a_failure_a_retry_can_change(operator_client, code):
    m = dead_with(f"m{code}", code)
    html = operator_client.get(f"/outbox/{m.pk}/send-again/", headers={"HX-Request": "true"}).content.decode()
    assert "Retrying will not help" not in html


def test_a_message_whose_action_is_not_registered_here_is_warned_about(operator_client):
    m = outbox_message("crm", "pending")
    OutboxMessage.objects.filter(pk=m.pk).update(action="crm.sync")
    html = operator_client.get(f"/outbox/{m.pk}/send-now/").content.decode()
    assert "No outbox action &#x27;crm.sync&#x27; is registered here" in html


def test_reprocessing_an_event_with_no_handler_for_its_type_is_warned_about(operator_client):
    event = webhook_event("evt_1", "dead", event_type="nobody.handles")
    html = operator_client.get(f"/events/{event.pk}/reprocess/").content.decode()
    assert "No handler is registered for stripe nobody.handles" in html


def test_reprocessing_an_event_that_has_a_handler_is_not_warned_about(operator_client):
    event = webhook_event("evt_1", "dead", event_type="invoice.paid")
    webhook_handler("stripe", "invoice.paid")(lambda e: None)
    try:
        html = operator_client.get(f"/events/{event.pk}/reprocess/").content.decode()
    finally:
        unregister("stripe", "invoice.paid")
    assert "Retrying will not help" not in html


def test_releasing_a_receipt_that_failed_with_a_403_is_warned_about(operator_client):
    claim = receipt_store.claim("s", "k403", "payment.create", {"a": 1})
    receipt_store.fail(receipt_store.Held("s", "k403", claim.receipt.fencing_token), error="forbidden", response_status=403)
    receipt = Receipt.objects.get(key="k403")
    html = operator_client.get(f"/receipts/{receipt.pk}/release/").content.decode()
    assert "It failed with HTTP 403" in html


def test_the_bulk_preview_counts_the_items_retrying_will_not_help(operator_client):
    dead_with("a", 403)
    dead_with("b", 404)
    dead_with("c", 503)
    dead_with("d", 429)
    html = operator_client.get("/outbox/bulk-send-again/?action=http.post").content.decode()
    assert 'data-count="4"' in html
    assert 'data-lasting="2"' in html and "Retrying will not help 2 of 4" in html


def test_the_bulk_preview_says_nothing_when_every_item_may_pass(operator_client):
    dead_with("c", 503)
    html = operator_client.get("/outbox/bulk-send-again/?action=http.post").content.decode()
    assert "Retrying will not help" not in html


@pytest.mark.parametrize("kind_module, model", [(store, OutboxMessage), (processing, WebhookEvent),
                                                (receipt_store, Receipt)])
def test_each_kinds_sql_form_picks_exactly_the_units_its_python_form_warns_about(kind_module, model):
    for code in (None, 200, 400, 403, 404, 408, 409, 422, 425, 429, 500, 503):
        dead_with(f"m{code}", code)
    unknown = outbox_message("crm", "pending")
    OutboxMessage.objects.filter(pk=unknown.pk).update(action="crm.sync")
    webhook_event("evt_none", "dead", event_type="nobody.handles")
    webhook_event("evt_star", "dead", slug="shop", provider="shopify", event_type="orders/create")
    webhook_handler("shopify", "*")(lambda e: None)
    for n, code in enumerate((403, 503, None)):
        claim = receipt_store.claim("s", f"r{n}", "payment.create", {"n": n})
        receipt_store.fail(receipt_store.Held("s", f"r{n}", claim.receipt.fencing_token), error="x", response_status=code)
    try:
        warned = {unit.pk for unit in model.objects.all() if kind_module.lasting_failure(unit)}
        picked = set(model.objects.filter(kind_module.lasting_failures()).values_list("pk", flat=True))
    finally:
        unregister("shopify", "*")
    assert warned == picked and warned
