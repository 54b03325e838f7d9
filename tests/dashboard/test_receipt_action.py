from __future__ import annotations

import pytest
from django.test import Client

from receipts.models import Attempt, AuditEntry, Receipt
from tests.dashboard.build import completed, failed, stuck

pytestmark = pytest.mark.django_db


def test_retry_asks_for_confirmation_before_acting(operator_client):
    r = failed("k1", retryable=False)
    response = operator_client.get(f"/receipts/{r.pk}/retry/")
    assert response.status_code == 200 and "Confirm retry" in response.content.decode()
    assert Receipt.objects.get(pk=r.pk).retryable is False  # a GET changes nothing


def test_retrying_a_burned_key_makes_it_retryable_and_is_audited(operator_client, operator):
    r = failed("k1", retryable=False)
    response = operator_client.post(f"/receipts/{r.pk}/retry/", {"reason": "customer asked"})
    assert response.status_code == 302 and response["Location"] == f"/receipts/{r.pk}/"
    r.refresh_from_db()
    assert r.status == "failed" and r.retryable and r.error == "customer asked"
    entry = AuditEntry.objects.get()
    assert (entry.actor, entry.action, entry.object_id, entry.user) == ("otto", "receipt.release", str(r.pk), operator)
    assert (entry.status_before, entry.status_after) == ("failed", "failed")
    assert Attempt.objects.filter(receipt=r, outcome="released", actor="otto").exists()


def test_releasing_a_stuck_receipt_fences_off_its_worker(operator_client):
    r = stuck("k1")
    operator_client.post(f"/receipts/{r.pk}/release/")
    r.refresh_from_db()
    assert r.status == "failed" and r.retryable and r.fencing_token == 2
    assert AuditEntry.objects.get().status_before == "processing"


def test_with_htmx_the_summary_is_swapped_in_place_with_the_new_status(operator_client):
    r = stuck("k1")
    response = operator_client.post(f"/receipts/{r.pk}/release/", headers={"HX-Request": "true"})
    html = response.content.decode()
    assert response.status_code == 200
    assert html.lstrip().startswith('<section id="receipt-summary"')
    assert 'data-status="failed"' in html and "Release: k1 is now failed" in html


def test_with_htmx_the_confirmation_is_a_fragment_that_posts_back_in_place(operator_client):
    r = failed("k1")
    html = operator_client.get(f"/receipts/{r.pk}/retry/", headers={"HX-Request": "true"}).content.decode()
    assert "<html" not in html
    assert f'hx-post="/receipts/{r.pk}/retry/" hx-target="#receipt-summary"' in html
    assert 'name="csrfmiddlewaretoken"' in html


def test_releasing_a_receipt_whose_lease_is_live_warns_that_a_worker_may_still_run_it(operator_client):
    warning = "Its lease has not expired"
    live, expired = stuck("live", minutes_ago=0), stuck("expired")
    assert warning in operator_client.get(f"/receipts/{live.pk}/release/").content.decode()
    assert warning not in operator_client.get(f"/receipts/{expired.pk}/release/").content.decode()
    page = operator_client.get(f"/receipts/{completed('done').pk}/release/").content.decode()
    assert "It is completed now: this will be refused." in page


def test_an_action_that_does_not_fit_the_status_is_a_409_and_changes_nothing(operator_client):
    c = completed("c")
    f = failed("f")
    assert operator_client.post(f"/receipts/{c.pk}/retry/", headers={"HX-Request": "true"}).status_code == 409
    assert operator_client.post(f"/receipts/{f.pk}/release/", headers={"HX-Request": "true"}).status_code == 409
    assert not AuditEntry.objects.exists()
    assert Receipt.objects.get(pk=c.pk).status == "completed"


def test_a_viewer_who_posts_an_action_gets_403_and_nothing_changes(viewer_client):
    r = failed("k1", retryable=False)
    assert viewer_client.post(f"/receipts/{r.pk}/retry/").status_code == 403
    assert viewer_client.get(f"/receipts/{r.pk}/retry/").status_code == 403
    assert Receipt.objects.get(pk=r.pk).retryable is False and not AuditEntry.objects.exists()


def test_an_action_without_the_csrf_token_is_refused(operator):
    c = Client(enforce_csrf_checks=True)
    c.force_login(operator)
    r = failed("k1", retryable=False)
    assert c.post(f"/receipts/{r.pk}/retry/").status_code == 403
    assert not AuditEntry.objects.exists()


def test_after_acting_it_returns_to_a_safe_next_page_only(operator_client):
    a, b = stuck("a"), stuck("b")
    assert operator_client.post(f"/receipts/{a.pk}/release/", {"next": "/stuck/"})["Location"] == "/stuck/"
    response = operator_client.post(f"/receipts/{b.pk}/release/", {"next": "https://evil.example/"})
    assert response["Location"] == f"/receipts/{b.pk}/"


def test_anonymous_actions_go_to_the_login_page(client):
    r = failed("k1")
    assert client.post(f"/receipts/{r.pk}/retry/")["Location"].startswith("/accounts/login/")
