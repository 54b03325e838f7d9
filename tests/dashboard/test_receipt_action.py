from __future__ import annotations

import pytest

from idemdash.dashboard import queries
from receipts import store
from receipts.downstream import downstream_key
from idemdash.core.models import AuditEntry
from receipts.models import Attempt, Receipt
from tests.dashboard.acting import assert_audited, post_action
from tests.dashboard.build import SCOPE, completed, failed, stuck

pytestmark = pytest.mark.django_db


def test_release_asks_for_confirmation_before_acting(operator_client):
    r = failed("k1", retryable=False)
    response = operator_client.get(f"/receipts/{r.pk}/release/")
    html = response.content.decode()
    assert response.status_code == 200 and "Confirm release" in html
    assert "the caller&#x27;s next attempt with this key runs the operation again" in html
    assert Receipt.objects.get(pk=r.pk).released_at is None  # a GET changes nothing


def test_releasing_a_failed_key_marks_it_released_keeps_its_error_and_is_audited(operator_client, operator):
    r = failed("k1", retryable=False)
    response = post_action(operator_client, f"/receipts/{r.pk}/", "release", "customer asked")
    r.refresh_from_db()
    assert (r.status, r.retryable, r.error) == ("failed", True, "card_declined")  # the root cause stays
    assert (r.released, r.released_by, r.release_reason, r.shown_status) == (True, "otto", "customer asked", "released")
    assert_audited(operator, "receipt.release", r, "failed", "released", "customer asked")
    assert Attempt.objects.filter(receipt=r, outcome="released", actor="otto").exists()
    html = operator_client.get(response["Location"]).content.decode()
    assert "Released k1: the caller&#x27;s next attempt will run." in html
    assert 'data-status="released"' in html and "Released — next attempt will run" in html
    assert "by <strong>otto</strong>" in html and "customer asked" in html and "card_declined" in html
    assert f'href="/receipts/{r.pk}/release/"' not in html  # nothing left to release
    assert 'data-live="true"' in html and 'hx-trigger="every 2s' in html  # waits for the next attempt


def test_a_reason_longer_than_the_audit_keeps_says_it_was_cut(operator_client, operator):
    r = failed("k1")
    post_action(operator_client, f"/receipts/{r.pk}/", "release", "the issuer said so " * 40)  # 760 characters
    r.refresh_from_db()
    assert len(r.release_reason) == 500 and r.release_reason.endswith(" … [cut from 759 characters]")
    assert AuditEntry.objects.get(action="receipt.release").detail == r.release_reason


def test_a_released_key_is_not_counted_or_listed_as_failed(operator_client):
    r = failed("k1")
    failed("k2")
    store.release(r, actor="otto")
    assert queries.receipt_stats(queries.WINDOWS["1h"])["failed"] == 1
    failed_list = operator_client.get("/receipts/?status=failed").content.decode()
    released_list = operator_client.get("/receipts/?status=released").content.decode()
    assert ">k2<" in failed_list and ">k1<" not in failed_list
    assert ">k1<" in released_list and ">k2<" not in released_list and 'data-status="released"' in released_list


def test_the_callers_next_attempt_clears_the_marker_and_appears_in_the_timeline(operator_client):
    r = failed("k1", retryable=False)
    store.release(r, actor="otto")
    result = store.claim(SCOPE, "k1", "payment.create", {"key": "k1"})
    assert result.outcome == "retried_after_failure"
    store.complete(store.Held(SCOPE, "k1", result.token), response_status=201, body="{}")
    r.refresh_from_db()
    assert (r.status, r.released_at, r.released_by, r.release_reason) == ("completed", None, "", "")
    html = operator_client.get(f"/receipts/{r.pk}/").content.decode()
    assert html.index("tl-released") < html.index("tl-retried_after_failure") < html.index("tl-completed")
    assert 'data-live="false"' in html and "hx-trigger" not in html.split('id="receipt-state"')[1][:200]


def test_with_htmx_the_summary_is_swapped_in_place_with_the_new_state(operator_client):
    r = stuck("k1")
    response = operator_client.post(f"/receipts/{r.pk}/release/", headers={"HX-Request": "true"})
    html = response.content.decode()
    assert response.status_code == 200
    assert html.lstrip().startswith('<section id="receipt-summary"')
    assert 'data-status="released"' in html and "Released k1: the caller&#x27;s next attempt will run." in html
    assert "is now failed" not in html


def test_with_htmx_the_confirmation_is_a_fragment_that_posts_back_in_place(operator_client):
    r = failed("k1")
    html = operator_client.get(f"/receipts/{r.pk}/release/", headers={"HX-Request": "true"}).content.decode()
    assert "<html" not in html
    assert f'hx-post="/receipts/{r.pk}/release/" hx-target="#receipt-summary"' in html
    assert 'name="csrfmiddlewaretoken"' in html


def test_releasing_a_stuck_receipt_fences_off_its_worker(operator_client):
    r = stuck("k1")
    operator_client.post(f"/receipts/{r.pk}/release/")
    r.refresh_from_db()
    assert r.released and r.retryable and r.fencing_token == 2 and r.error == ""
    assert AuditEntry.objects.get().status_before == "processing"


def test_releasing_a_receipt_whose_lease_is_live_warns_that_a_worker_may_still_run_it(operator_client):
    warning = "Its lease has not expired"
    live, expired = stuck("live", minutes_ago=0), stuck("expired")
    assert warning in operator_client.get(f"/receipts/{live.pk}/release/").content.decode()
    assert warning not in operator_client.get(f"/receipts/{expired.pk}/release/").content.decode()
    page = operator_client.get(f"/receipts/{completed('done').pk}/release/").content.decode()
    assert "It is completed now: this will be refused." in page


def _confirm_button(html: str) -> str:
    return html.split('class="confirm-buttons"')[1].split('type="submit"')[0]


def test_releasing_a_financial_charge_that_timed_out_is_the_red_confirmation_naming_the_downstream_key(operator_client):
    r = failed("k1", "payment.capture", error="ReadTimeout: the card processor timed out after 30 s")
    html = operator_client.get(f"/receipts/{r.pk}/release/").content.decode()
    caution = html.split('data-role="caution"')[1].split("</p>")[0]
    assert "payment.capture is financial and its last attempt failed with ReadTimeout" in caution
    assert downstream_key(r.scope, r.key, r.created_at) in caution and "happen twice" in caution
    assert "button danger" in _confirm_button(html)


def test_releasing_a_charge_whose_outcome_is_known_or_a_harmless_hung_step_is_not_red(operator_client):
    declined = failed("k1", "payment.capture")  # card_declined: the provider answered
    hung = stuck("k2", "lead.enrich")  # not financial, not held after a crash: a second run is harmless
    for r in (declined, hung):
        html = operator_client.get(f"/receipts/{r.pk}/release/").content.decode()
        assert 'data-role="caution"' not in html and "button primary" in _confirm_button(html), r.key
    assert "its lease is revoked" in operator_client.get(f"/receipts/{hung.pk}/release/").content.decode()


def test_a_hung_charge_is_red_before_release_and_run_again_names_its_downstream_key(operator_client, settings):
    hung = stuck("k1", "payment.capture")
    html = operator_client.get(f"/receipts/{hung.pk}/release/").content.decode()
    assert "has not settled" in html and 'data-role="note"' in html and "button danger" in _confirm_button(html)
    settings.RECEIPTS_OPERATIONS = {"email.send": {"after_crash": "hold"}}
    held = stuck("h1", "email.send")
    html = operator_client.get(f"/receipts/{held.pk}/run-again/").content.decode()
    assert "email.send is irreversible (its policy holds it after a crash)" in html
    assert "Before you run it again, look up the downstream key " + downstream_key(SCOPE, "h1", held.created_at) in html


def test_from_the_stuck_board_the_confirmation_shows_the_whole_receipt_and_returns_with_the_outcome(operator_client):
    r = stuck("k1", operation="refund.create")
    html = operator_client.get(f"/receipts/{r.pk}/release/?next=/stuck/").content.decode()
    for shown in ("refund.create", SCOPE, "Lease until", "Attempts", "Confirm release", 'value="/stuck/"'):
        assert shown in html, shown
    response = operator_client.post(f"/receipts/{r.pk}/release/", {"next": "/stuck/"})
    assert response["Location"] == "/stuck/"
    board = operator_client.get("/stuck/").content.decode()
    assert "Released k1: the caller&#x27;s next attempt will run." in board and "No receipt is stuck" in board


def test_an_action_that_does_not_fit_the_state_is_a_409_and_changes_nothing(operator_client):
    c, f = completed("c"), failed("f")
    store.release(f, actor="otto")
    for r in (c, f):
        response = operator_client.post(f"/receipts/{r.pk}/release/", headers={"HX-Request": "true"})
        assert response.status_code == 409
    assert "Not done: It is already released" in response.content.decode()
    assert AuditEntry.objects.count() == 1
    assert Receipt.objects.get(pk=c.pk).status == "completed"


def test_after_acting_it_returns_to_a_safe_next_page_only(operator_client):
    a, b = stuck("a"), stuck("b")
    assert operator_client.post(f"/receipts/{a.pk}/release/", {"next": "/stuck/"})["Location"] == "/stuck/"
    response = operator_client.post(f"/receipts/{b.pk}/release/", {"next": "https://evil.example/"})
    assert response["Location"] == f"/receipts/{b.pk}/"


@pytest.fixture
def held_operation(settings):
    settings.RECEIPTS_OPERATIONS = {"email.send": {"after_crash": "hold"}}


def test_a_held_receipt_offers_mark_completed_and_run_again_instead_of_release(operator_client, held_operation):
    r = stuck("h1", "email.send")
    html = operator_client.get(f"/receipts/{r.pk}/").content.decode()
    assert 'data-status="outcome-unknown"' in html and "Outcome unknown — held" in html
    assert f'href="/receipts/{r.pk}/mark-completed/"' in html and f'href="/receipts/{r.pk}/run-again/"' in html
    assert f'href="/receipts/{r.pk}/release/"' not in html
    board = operator_client.get("/stuck/").content.decode()
    assert f"/receipts/{r.pk}/mark-completed/?next=" in board and f"/receipts/{r.pk}/run-again/?next=" in board
    confirm = operator_client.get(f"/receipts/{r.pk}/mark-completed/").content.decode()
    assert 'name="result"' in confirm and "csrfmiddlewaretoken" in confirm


def test_marking_a_held_receipt_completed_stores_the_result_replays_it_and_is_audited(
    operator_client, operator, held_operation
):
    r = stuck("h1", "email.send")
    response = operator_client.post(f"/receipts/{r.pk}/mark-completed/", {"reason": "seen at the provider",
                                                                         "result": '{"sent": true}'})
    assert response.status_code == 302
    r.refresh_from_db()
    assert (r.status, r.response_body, r.response_content_type) == ("completed", '{"sent":true}', "application/json")
    assert_audited(operator, "receipt.mark_completed", r, "outcome-unknown", "completed", "seen at the provider")
    assert Attempt.objects.filter(receipt=r, outcome="completed", actor="otto").exists()
    assert store.claim(SCOPE, "h1", "email.send", {"key": "h1"}).outcome == "replayed"


def test_a_result_that_is_not_json_is_refused_with_a_400_and_changes_nothing(operator_client, held_operation):
    r = stuck("h1", "email.send")
    response = operator_client.post(f"/receipts/{r.pk}/mark-completed/", {"result": "{sent"}, headers={"HX-Request": "true"})
    assert response.status_code == 400 and "The result is not JSON" in response.content.decode()
    assert Receipt.objects.get(pk=r.pk).outcome_unknown and not AuditEntry.objects.exists()


def test_running_a_held_receipt_again_lets_the_next_attempt_run_and_is_audited(operator_client, operator, held_operation):
    r = stuck("h1", "email.send")
    post_action(operator_client, f"/receipts/{r.pk}/", "run-again", "nothing at the provider")
    assert_audited(operator, "receipt.run_again", r, "outcome-unknown", "released", "nothing at the provider")
    assert store.claim(SCOPE, "h1", "email.send", {"key": "h1"}).outcome == "retried_after_failure"


def test_the_repairs_are_refused_for_a_receipt_that_is_not_held(operator_client, settings):
    r = stuck("h1", "email.send")  # after_crash "rerun": the next claim takes it over
    for action in ("mark-completed", "run-again"):
        response = operator_client.post(f"/receipts/{r.pk}/{action}/", {"result": "{}"}, headers={"HX-Request": "true"})
        assert response.status_code == 409
    assert Receipt.objects.get(pk=r.pk).status == "processing" and not AuditEntry.objects.exists()


def test_viewers_cannot_repair_a_held_receipt(viewer_client, held_operation):
    r = stuck("h1", "email.send")
    for action in ("mark-completed", "run-again"):
        assert viewer_client.post(f"/receipts/{r.pk}/{action}/", {"result": "{}"}).status_code == 403
    assert Receipt.objects.get(pk=r.pk).outcome_unknown
