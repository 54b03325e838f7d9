from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from django.test import RequestFactory
from django.utils import timezone

from idemdash.core import audit
from idemdash.core.clients import client_for_request, create_token
from receipts import retention, store
from receipts.downstream import downstream_key
from idemdash.core.models import ApiClient, AuditEntry
from receipts.models import ArchivedReceipt, Attempt, Receipt

pytestmark = pytest.mark.django_db

SCOPE = "client:test"


@pytest.fixture(autouse=True)
def _fast_passwords(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def a_receipt(key: str = "k1", complete: bool = False) -> Receipt:
    result = store.claim(SCOPE, key, "payment.capture", {"amount": 100, "currency": "eur"})
    if complete:
        store.complete(store.Held(SCOPE, key, result.token), response_status=201, content_type="application/json", body='{"id":7,"ok":true}')
    return Receipt.objects.get(key=key)


def test_the_receipt_list_filters_by_status_operation_and_scope_and_searches_keys(admin_client):
    a_receipt("findme")
    a_receipt("other")
    page = admin_client.get("/admin/receipts/receipt/", {"q": "findme"})
    assert page.status_code == 200
    text = page.content.decode()
    assert "findme" in text and ">other<" not in text
    filters = [spec.field_path for spec in page.context["cl"].filter_specs if hasattr(spec, "field_path")]
    assert filters == ["status", "operation", "scope"]
    filtered = admin_client.get("/admin/receipts/receipt/", {"status__exact": "completed"})
    assert filtered.context["cl"].result_count == 0


def test_a_receipt_page_is_read_only_with_pretty_printed_json(admin_client):
    receipt = a_receipt(complete=True)
    page = admin_client.get(f"/admin/receipts/receipt/{receipt.pk}/change/")
    text = page.content.decode()
    assert page.status_code == 200
    assert '&quot;amount&quot;: 100,\n  &quot;currency&quot;' in text  # indented request
    assert '&quot;id&quot;: 7,\n  &quot;ok&quot;: true' in text  # indented response
    assert 'name="key"' not in text and 'name="status"' not in text


def test_a_permanent_receipt_shows_permanent_for_its_expiry_and_its_ttl(admin_client, settings):
    settings.RECEIPTS_OPERATIONS = {"payment.capture": {"ttl_seconds": None}}
    receipt = a_receipt(complete=True)
    text = admin_client.get(f"/admin/receipts/receipt/{receipt.pk}/change/").content.decode()
    assert "permanent (never expires)" in text and "TTL permanent" in text


def test_an_attempt_that_waited_shows_how_long(admin_client):
    receipt = a_receipt(complete=True)
    waited = Attempt.record(receipt, outcome=Attempt.Outcome.WAITED, waited_ms=250, created_at=timezone.now())
    text = admin_client.get(f"/admin/receipts/attempt/{waited.pk}/change/").content.decode()
    assert "Waited ms" in text or "waited ms" in text
    assert re.search(r">\s*250\s*<", text)
    assert admin_client.get("/admin/receipts/attempt/", {"outcome__exact": "waited"}).status_code == 200


def test_receipts_cannot_be_added_in_the_admin(admin_client):
    assert admin_client.get("/admin/receipts/receipt/add/").status_code == 403


def test_release_releases_audits_and_skips_completed_receipts(admin_client, admin_user):
    stuck = a_receipt("stuck")
    done = a_receipt("done", complete=True)
    response = admin_client.post(
        "/admin/receipts/receipt/",
        {"action": "release", "_selected_action": [stuck.pk, done.pk]},
        follow=True,
    )
    assert response.status_code == 200
    text = response.content.decode()
    assert "Released 1 receipt(s)." in text and "Skipped 1" in text
    stuck.refresh_from_db()
    assert stuck.status == "failed" and stuck.retryable
    assert Receipt.objects.get(key="done").status == "completed"
    entry = AuditEntry.objects.get(action="receipt.release")
    assert entry.actor == admin_user.username and entry.user == admin_user
    assert entry.object_id == str(stuck.pk) and entry.status_before == "processing"
    assert store.claim(SCOPE, "stuck", "payment.capture", {"amount": 100, "currency": "eur"}).outcome == "retried_after_failure"


def test_attempts_are_read_only_and_filter_by_outcome(admin_client):
    a_receipt()
    attempt = Attempt.objects.get()
    assert admin_client.get("/admin/receipts/attempt/", {"outcome__exact": "claimed"}).status_code == 200
    assert admin_client.get("/admin/receipts/attempt/add/").status_code == 403
    page = admin_client.get(f"/admin/receipts/attempt/{attempt.pk}/change/")
    assert page.status_code == 200 and 'name="_save"' not in page.content.decode()
    assert admin_client.post(f"/admin/receipts/attempt/{attempt.pk}/delete/", {"post": "yes"}).status_code == 403
    assert Attempt.objects.count() == 1


def test_an_attempt_links_its_receipt_and_after_the_purge_shows_its_own_scope_and_key(admin_client):
    receipt = a_receipt("purged-later", complete=True)
    attempt = Attempt.objects.filter(key="purged-later").first()
    page = admin_client.get(f"/admin/receipts/attempt/{attempt.pk}/change/").content.decode()
    assert f'href="/admin/receipts/receipt/{receipt.pk}/change/"' in page
    Receipt.objects.filter(pk=receipt.pk).update(expires_at=timezone.now() - timedelta(minutes=1))
    retention.purge()
    assert not Receipt.objects.exists() and Attempt.objects.filter(receipt_id=receipt.pk).count() == 2
    listing = admin_client.get("/admin/receipts/attempt/")
    assert listing.status_code == 200 and "purged-later" in listing.content.decode()
    page = admin_client.get(f"/admin/receipts/attempt/{attempt.pk}/change/")
    text = page.content.decode()
    assert page.status_code == 200
    assert f"{receipt.pk} (purged;" in text and "purged-later" in text and SCOPE in text


def test_archived_financial_receipts_are_listed_searchable_and_read_only(admin_client):
    receipt = a_receipt("archived-pay", complete=True)
    Receipt.objects.filter(pk=receipt.pk).update(expires_at=timezone.now() - timedelta(minutes=1))
    retention.purge()
    archived = ArchivedReceipt.objects.get(original_id=receipt.pk)
    listing = admin_client.get("/admin/receipts/archivedreceipt/", {"q": "archived-pay"})
    assert listing.status_code == 200 and "archived-pay" in listing.content.decode()
    page = admin_client.get(f"/admin/receipts/archivedreceipt/{archived.pk}/change/")
    text = page.content.decode()
    assert page.status_code == 200 and 'name="_save"' not in text
    assert "&quot;ok&quot;: true" in text and "&quot;currency&quot;: &quot;eur&quot;" in text  # request and response, pretty
    assert "Compacted at" in text  # empty here: this receipt kept its bodies (tests/receipts/test_compaction.py)
    assert admin_client.get("/admin/receipts/archivedreceipt/add/").status_code == 403
    assert admin_client.post(f"/admin/receipts/archivedreceipt/{archived.pk}/delete/", {"post": "yes"}).status_code == 403
    assert ArchivedReceipt.objects.count() == 1


def test_audit_entries_are_read_only(admin_client, admin_user):
    entry = audit.record("ada", "receipt.release", a_receipt(), user=admin_user)
    assert admin_client.get("/admin/idemdash_core/auditentry/").status_code == 200
    assert admin_client.get("/admin/idemdash_core/auditentry/add/").status_code == 403
    assert 'name="_save"' not in admin_client.get(f"/admin/idemdash_core/auditentry/{entry.pk}/change/").content.decode()


def test_adding_an_api_client_shows_its_token_once_and_stores_only_the_hash(admin_client, admin_user):
    form = admin_client.get("/admin/idemdash_core/apiclient/add/").content.decode()
    assert 'name="name"' in form and "token_hash" not in form
    page = admin_client.post("/admin/idemdash_core/apiclient/add/", {"name": "billing"})
    assert page.status_code == 200
    token = re.search(r'<code id="api-token"[^>]*>([^<]+)</code>', page.content.decode()).group(1)
    client = ApiClient.objects.get(name="billing")
    assert token.startswith(client.token_prefix) and token not in client.token_hash
    request = RequestFactory().get("/", headers={"Authorization": f"Bearer {token}"})
    assert client_for_request(request) == client
    assert AuditEntry.objects.get(action="apiclient.create").actor == admin_user.username
    assert token not in admin_client.get(f"/admin/idemdash_core/apiclient/{client.pk}/change/").content.decode()


def test_an_api_clients_hash_and_name_are_never_editable(admin_client):
    client, _ = create_token("billing")
    page = admin_client.get(f"/admin/idemdash_core/apiclient/{client.pk}/change/").content.decode()
    assert "token_hash" not in page and 'name="name"' not in page
    admin_client.post(f"/admin/idemdash_core/apiclient/{client.pk}/change/", {"name": "x", "token_hash": "0" * 64})
    client.refresh_from_db()
    assert client.name == "billing" and client.token_hash != "0" * 64


def test_revoking_api_clients_is_audited_and_stops_their_tokens(admin_client):
    client, token = create_token("billing")
    admin_client.post("/admin/idemdash_core/apiclient/", {"action": "revoke_selected", "_selected_action": [client.pk]})
    client.refresh_from_db()
    assert client.revoked_at is not None
    assert AuditEntry.objects.get(action="apiclient.revoke").object_id == str(client.pk)
    assert client_for_request(RequestFactory().get("/", headers={"Authorization": f"Bearer {token}"})) is None


def test_the_admin_needs_staff(client, django_user_model):
    user = django_user_model.objects.create_user("bob", password="pw-123456")
    client.force_login(user)
    assert client.get("/admin/receipts/receipt/").status_code == 302


def test_a_receipt_page_shows_the_policy_and_the_pattern_that_chose_it(admin_client):
    receipt = a_receipt()
    text = admin_client.get(f"/admin/receipts/receipt/{receipt.pk}/change/").content.decode()
    assert "Policy (today&#x27;s settings)" in text
    assert "financial · TTL 604800 s · lease 30 s · on failure: retry" in text
    assert "matched: RECEIPTS_FINANCIAL_OPERATIONS &#x27;payment.*&#x27;" in text


# --- the repairs of an outcome-unknown receipt (after_crash "hold") --------------------------------

REQUEST = {"amount": 100, "currency": "eur"}


@pytest.fixture
def holding(settings):
    settings.RECEIPTS_OPERATIONS = {"payment.capture": {"after_crash": "hold"}}


def a_held_receipt(key: str = "held") -> Receipt:
    """A receipt whose attempt's lease ran out before it settled: outcome-unknown."""
    a_receipt(key)
    Receipt.objects.filter(key=key).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    receipt = Receipt.objects.get(key=key)
    assert receipt.outcome_unknown
    return receipt


def test_the_receipt_list_shows_a_held_receipt_as_outcome_unknown(admin_client, holding):
    a_held_receipt()
    assert ">outcome-unknown<" in admin_client.get("/admin/receipts/receipt/").content.decode()


def test_mark_completed_asks_for_the_result_then_stores_it_audited_once_and_later_claims_replay_it(
    admin_client, admin_user, holding
):
    held = a_held_receipt()
    other = a_receipt("running")  # not held: skipped
    selected = {"action": "mark_completed", "_selected_action": [held.pk, other.pk]}
    form = admin_client.post("/admin/receipts/receipt/", selected)
    assert form.status_code == 200 and 'name="result"' in form.content.decode()
    assert downstream_key(SCOPE, "held", held.created_at) in form.content.decode()  # what to look the effect up by
    assert AuditEntry.objects.count() == 0 and Receipt.objects.get(pk=held.pk).outcome_unknown  # nothing done yet

    done = admin_client.post("/admin/receipts/receipt/", {
        **selected, "apply": "Mark completed", "result": '{"id": "pi_7", "found": true}', "reason": "Stripe has pi_7",
    }, follow=True)
    text = done.content.decode()
    assert "Mark completed: 1 receipt(s)." in text and "Skipped 1" in text
    [entry] = AuditEntry.objects.all()
    assert (entry.action, entry.actor, entry.user, entry.detail) == (
        "receipt.mark_completed", admin_user.username, admin_user, "Stripe has pi_7")
    assert entry.object_id == str(held.pk) and entry.status_before == "outcome-unknown"
    assert Receipt.objects.get(pk=other.pk).status == "processing"
    replay = store.claim(SCOPE, "held", "payment.capture", REQUEST)
    assert replay.outcome == "replayed" and json.loads(replay.receipt.response_body) == {"id": "pi_7", "found": True}


def test_mark_completed_with_a_result_that_is_not_json_shows_the_form_again_and_changes_nothing(admin_client, holding):
    held = a_held_receipt()
    page = admin_client.post("/admin/receipts/receipt/", {
        "action": "mark_completed", "_selected_action": [held.pk], "apply": "Mark completed", "result": "{not json",
    })
    assert page.status_code == 200 and "The result is not JSON" in page.content.decode()
    assert Receipt.objects.get(pk=held.pk).outcome_unknown and AuditEntry.objects.count() == 0


def test_run_again_gives_the_key_back_audited_once_and_the_next_claim_runs(admin_client, admin_user, holding):
    held = a_held_receipt()
    done = admin_client.post("/admin/receipts/receipt/", {"action": "run_again", "_selected_action": [held.pk]},
                             follow=True)
    assert "Run again: 1 receipt(s)." in done.content.decode()
    [entry] = AuditEntry.objects.all()
    assert (entry.action, entry.actor, entry.status_before) == ("receipt.run_again", admin_user.username, "outcome-unknown")
    assert store.claim(SCOPE, "held", "payment.capture", REQUEST).outcome == "retried_after_failure"


def test_the_repairs_need_the_change_permission(client, django_user_model, holding):
    from django.contrib.auth.models import Permission

    viewer = django_user_model.objects.create_user("vera", password="pw-123456", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_receipt"))
    client.force_login(viewer)
    held = a_held_receipt()
    listing = client.get("/admin/receipts/receipt/").content.decode()
    assert "mark_completed" not in listing and "run_again" not in listing
    for action in ("mark_completed", "run_again"):
        client.post("/admin/receipts/receipt/", {
            "action": action, "_selected_action": [held.pk], "apply": "Mark completed", "result": "{}",
        })
    assert Receipt.objects.get(pk=held.pk).outcome_unknown and AuditEntry.objects.count() == 0


@pytest.mark.django_db
def test_the_receipt_search_finds_a_references_exact_value_and_the_page_lists_its_references(admin_client):
    import receipts
    from django.urls import reverse

    from receipts.models import Receipt

    receipts.run_once("order-7", "payment.create", lambda: receipts.current().refer("stripe.charge", "ch_77"))
    receipts.run_once("order-8", "payment.create", lambda: receipts.current().refer("stripe.charge", "ch_778"))
    found = admin_client.get(reverse("admin:receipts_receipt_changelist"), {"q": "ch_77"}).content.decode()
    assert "order-7" in found and "order-8" not in found
    receipt = Receipt.objects.get(key="order-7")
    page = admin_client.get(reverse("admin:receipts_receipt_change", args=[receipt.pk])).content.decode()
    assert "ch_77" in page and "stripe.charge" in page
