"""An operator's action posted as the dashboard's form posts it, and the audit entry it must
leave: one copy for the receipt, event and message action tests."""

from __future__ import annotations

from django.test import Client

from idemdash.core.models import AuditEntry


def post_action(client: Client, detail_url: str, action: str, reason: str):
    """POST the action's form with a reason; without htmx it redirects back to the detail page."""
    response = client.post(f"{detail_url}{action}/", {"reason": reason})
    assert response.status_code == 302 and response["Location"] == detail_url
    return response


def assert_audited(user, action: str, obj, status_before: str, status_after: str, detail: str) -> None:
    """Exactly one audit entry, naming who did what to which row, from which status to which."""
    entry = AuditEntry.objects.get()
    assert (entry.actor, entry.user, entry.action, entry.object_id) == (user.username, user, action, str(obj.pk))
    assert (entry.status_before, entry.status_after, entry.detail) == (status_before, status_after, detail)
