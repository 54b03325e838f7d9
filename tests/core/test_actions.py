"""The operator-action registry (idemdash/core/actions.py): the apps' kinds are found by
module name, and an action on a selection runs each row through its domain function,
counting what it refused instead of stopping."""

from __future__ import annotations

import pytest

from idemdash.core import actions
from idemdash.core.audit import AuditEntry
from receipts.outbox.models import OutboxMessage
from tests.dashboard.build import outbox_message, webhook_event


def test_it_finds_the_kind_each_app_declares():
    kinds = actions.kinds()
    assert {name: kind.model._meta.label_lower for name, kind in kinds.items()} == {
        "receipt": "receipts.receipt", "event": "webhooks.webhookevent", "message": "outbox.outboxmessage",
    }
    assert [(a.name, a.verb) for a in kinds["message"].actions] == [
        ("send_now", "Send now"), ("send_again", "Send again"), ("release", "Release")]
    assert kinds["event"].bulk.audit_action == "webhook_event.reprocess"


@pytest.mark.django_db
def test_a_row_is_labelled_for_a_sentence_and_for_a_list():
    event = actions.kind("event")
    row = webhook_event("evt_9", "dead")
    assert (event.row_key(row), event.label(row)) == ("evt_9", "event evt_9")
    assert event.units().get(pk=row.pk).endpoint.slug == "stripe"


@pytest.mark.django_db
def test_acting_on_each_does_what_applies_and_reports_each_refusal():
    dead, pending = outbox_message("m-dead", "dead"), outbox_message("m-pending", "pending")
    send_again = actions.kind("message").action("send_again")
    done, refused = actions.act_on_each(
        OutboxMessage.objects.order_by("key"), send_again, actor="otto", user=None, reason="receiver fixed"
    )
    assert done == 1
    assert [(row.pk, type(exc)) for row, exc in refused] == [(pending.pk, send_again.refused[0])]
    assert OutboxMessage.objects.get(pk=dead.pk).status == "pending"
    entry = AuditEntry.objects.get()
    assert (entry.action, entry.actor, entry.object_id, entry.detail) == (
        "outbox_message.send_again", "otto", str(dead.pk), "receiver fixed")
