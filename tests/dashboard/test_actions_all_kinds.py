"""What holds for an operator's action on a receipt, an event or a message alike, one
parametrized copy for the kinds: a dead event reprocessed or a dead message sent again is
audited with the status before and after; a viewer gets 403 on every action's confirmation
and POST, anonymous is sent to log in, and a POST without the CSRF token is refused, each
leaving the row and the audit log untouched."""

from __future__ import annotations

import pytest
from django.test import Client

from idemdash.core.models import AuditEntry

from receipts.models import Receipt
from receipts.outbox.models import OutboxMessage
from tests.dashboard.acting import assert_audited, post_action
from tests.dashboard.build import failed, outbox_message, webhook_event
from webhooks.models import WebhookEvent

pytestmark = pytest.mark.django_db

# kind: (make the row, its detail URL prefix, its main action, what must not change)
KINDS = {
    "receipt": (lambda: failed("k1", retryable=False), "/receipts/", "release",
                lambda row: Receipt.objects.get(pk=row.pk).retryable),
    "event": (lambda: webhook_event("evt_1", "dead"), "/events/", "reprocess",
              lambda row: WebhookEvent.objects.get(pk=row.pk).status),
    "message": (lambda: outbox_message("m1", "dead"), "/outbox/", "send-again",
                lambda row: OutboxMessage.objects.get(pk=row.pk).status),
}
ACTIONS = [("receipt", "release"), ("event", "reprocess"), ("event", "release")] + [
    ("message", action) for action in ("send-now", "send-again", "release")]


@pytest.mark.parametrize("kind,reason,audited,after", [
    ("event", "ledger is back", "webhook_event.reprocess", "received"),
    ("message", "receiver fixed", "outbox_message.send_again", "pending"),
])
def test_acting_on_a_dead_row_is_audited_with_the_status_before_and_after(
    operator_client, operator, kind, reason, audited, after
):
    make, prefix, action, _ = KINDS[kind]
    row = make()
    post_action(operator_client, f"{prefix}{row.pk}/", action, reason)
    row.refresh_from_db()
    assert (row.status, row.attempts) == (after, 0)
    assert_audited(operator, audited, row, "dead", after, reason)


def _a_row(kind: str):
    """A row of that kind, its detail URL, its main action, and the state that must not change."""
    make, prefix, action, state = KINDS[kind]
    row = make()
    return row, f"{prefix}{row.pk}/", action, state(row)


def _untouched(kind: str, row, before) -> None:
    assert KINDS[kind][3](row) == before and not AuditEntry.objects.exists()


@pytest.mark.parametrize("kind,action", ACTIONS)
def test_a_viewer_gets_403_and_nothing_changes(viewer_client, kind, action):
    row, url, _, before = _a_row(kind)
    assert viewer_client.get(f"{url}{action}/").status_code == 403
    assert viewer_client.post(f"{url}{action}/").status_code == 403
    _untouched(kind, row, before)


@pytest.mark.parametrize("kind", KINDS)
def test_anonymous_is_sent_to_log_in(client, kind):
    row, url, action, before = _a_row(kind)
    assert client.post(f"{url}{action}/")["Location"].startswith("/accounts/login/")
    _untouched(kind, row, before)


@pytest.mark.parametrize("kind", KINDS)
def test_it_needs_the_csrf_token(operator, kind):
    row, url, action, before = _a_row(kind)
    c = Client(enforce_csrf_checks=True)
    c.force_login(operator)
    assert c.post(f"{url}{action}/").status_code == 403
    _untouched(kind, row, before)


@pytest.mark.parametrize("kind,card", [
    ("receipt", "receipt-audit"), ("event", "webhookevent-audit"), ("message", "outboxmessage-audit"),
])
def test_an_action_done_in_place_refreshes_the_pages_operator_actions_card(operator_client, operator, kind, card):
    row, url, action, _ = _a_row(kind)
    page = operator_client.get(url).content.decode()
    assert f'<div id="{card}">' in page and "Operator actions" not in page  # the empty card's place

    swapped = operator_client.post(f"{url}{action}/", {"reason": "fixed upstream"}, HTTP_HX_REQUEST="true")
    html = swapped.content.decode()
    assert swapped.status_code == 200 and "{#" not in html and "#}" not in html
    # The summary is swapped in place; the card is swapped out of band, with the new entry.
    oob = html[html.index(f'<div id="{card}" hx-swap-oob="true">'):]
    assert "Operator actions" in oob and "fixed upstream" in oob and f"<td>{operator.get_username()}</td>" in oob


def test_a_refused_action_done_in_place_leaves_the_card_alone(operator_client):
    row, url, action, _ = _a_row("event")
    WebhookEvent.objects.filter(pk=row.pk).update(status="processing")
    refused = operator_client.post(f"{url}reprocess/", {"reason": "x"}, HTTP_HX_REQUEST="true")
    assert refused.status_code == 409 and "hx-swap-oob" not in refused.content.decode()
