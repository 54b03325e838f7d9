from __future__ import annotations

from datetime import timedelta

import pytest
import time_machine
from django.utils import timezone

from receipts import retention
from receipts.models import Attempt
from tests.dashboard.build import completed, failed, mismatched, stuck

pytestmark = pytest.mark.django_db


def test_it_shows_every_field_and_pretty_prints_request_and_response(viewer_client):
    r = completed("k1", request={"amount": 500, "currency": "eur"})
    html = viewer_client.get(f"/receipts/{r.pk}/").content.decode()
    assert "k1" in html and "payment.create" in html and "client:shop" in html and r.fingerprint in html
    assert '&quot;amount&quot;: 500,\n  &quot;currency&quot;: &quot;eur&quot;' in html
    assert '&quot;id&quot;: &quot;ch_1&quot;' in html and "HTTP 201" in html


def test_the_timeline_lists_every_attempt_in_order(viewer_client):
    r = failed("k1")
    from receipts import store

    store.claim("client:shop", "k1", "payment.create", {"key": "k1"})  # retried after failure
    html = viewer_client.get(f"/receipts/{r.pk}/").content.decode()
    order = [html.index(f"badge-outcome-{o}") for o in ("claimed", "failed", "retried_after_failure")]
    assert order == sorted(order)


def test_a_422_receipt_shows_the_field_by_field_diff(viewer_client):
    r = mismatched("k1", {"amount": 500, "currency": "eur"}, {"amount": 900, "currency": "eur", "note": "x"})
    html = viewer_client.get(f"/receipts/{r.pk}/").content.decode()
    assert "Conflict explorer" in html
    assert '<code>/amount</code> <span class="badge badge-muted">changed</span>' in html
    assert "<code>500</code>" in html and "<code>900</code>" in html
    assert '<code>/note</code> <span class="badge badge-muted">added</span>' in html
    assert "/currency" not in html


def test_operators_see_the_action_that_fits_the_status_and_viewers_see_none(viewer_client, operator_client):
    f, s, c = failed("f"), stuck("s"), completed("c")
    assert "Release…" in operator_client.get(f"/receipts/{f.pk}/").content.decode()
    assert "Release…" in operator_client.get(f"/receipts/{s.pk}/").content.decode()
    html = operator_client.get(f"/receipts/{c.pk}/").content.decode()
    assert "Retry…" not in html and "Release…" not in html
    viewed = viewer_client.get(f"/receipts/{f.pk}/").content.decode()
    assert "Release…" not in viewed and "card_declined" in viewed


def test_a_stuck_receipt_is_flagged(viewer_client):
    s = stuck("s")
    assert "stuck: lease expired" in viewer_client.get(f"/receipts/{s.pk}/").content.decode()


def test_an_unknown_receipt_is_404(viewer_client):
    assert viewer_client.get("/receipts/999999/").status_code == 404


def test_a_retry_storm_shows_the_latest_attempts_and_the_true_count(viewer_client, monkeypatch):
    from idemdash.dashboard.views import receipts as views
    from receipts import store

    monkeypatch.setattr(views, "LOG_LIMIT", 5)
    r = stuck("storm", minutes_ago=0)  # claimed now: its lease is live, so claims are 409s
    for _ in range(9):
        store.claim("client:shop", "storm", "payment.create", {"key": "storm"})
    html = viewer_client.get(f"/receipts/{r.pk}/").content.decode()
    assert "The latest 5 of 10 attempts" in html
    assert html.count("badge-outcome-in_progress") == 5 and "badge-outcome-claimed" not in html


def test_a_key_claimed_again_after_its_receipt_was_purged_shows_only_its_new_attempts(viewer_client):
    with time_machine.travel(timezone.now() - timedelta(days=8), tick=False):
        mismatched("k1", {"amount": 500}, {"amount": 900})
    retention.purge()
    assert Attempt.objects.filter(key="k1").count() == 3  # the purged life's log stays
    again = completed("k1")
    page = viewer_client.get(f"/receipts/{again.pk}/")
    assert page.status_code == 200
    assert [a.outcome for a in page.context["attempts"]] == ["claimed", "completed"]
    assert page.context["mismatches"] == []


def test_it_shows_the_policy_the_operation_gets_and_the_pattern_that_matched(viewer_client, settings):
    r = completed("k1")  # payment.create
    html = viewer_client.get(f"/receipts/{r.pk}/").content.decode()
    policy = html[html.index('id="receipt-policy"'):]
    policy = policy[: policy.index("</dd>")]
    assert ">financial<" in policy and "TTL 7 d" in policy and "lease 30 s" in policy
    assert "on failure: <strong>retry</strong>" in policy
    assert "RECEIPTS_FINANCIAL_OPERATIONS &#x27;payment.*&#x27;" in policy
    settings.RECEIPTS_OPERATIONS = {"payment.create": {"financial": False, "on_failure": "burn"}}
    html = viewer_client.get(f"/receipts/{r.pk}/").content.decode()
    assert "not financial" in html and "TTL 24 h" in html and "on failure: <strong>burn</strong>" in html
    assert "RECEIPTS_OPERATIONS[&#x27;payment.create&#x27;]" in html


def test_a_permanent_receipt_says_so_instead_of_an_expiry(viewer_client, operator_client, settings):
    settings.RECEIPTS_OPERATIONS = {"email.welcome": {"ttl_seconds": None}}
    r = completed("welcome-1", "email.welcome")
    html = viewer_client.get(f"/receipts/{r.pk}/").content.decode()
    expires = html[html.index('id="receipt-expires"'):]
    assert expires[: expires.index("</dd>")].count("permanent") == 1
    assert "TTL permanent" in html
    # An operator is told why there is nothing to release.
    assert "keeps its result for ever" in operator_client.get(f"/receipts/{r.pk}/").content.decode()


def test_the_timeline_says_how_long_each_caller_waited_for_the_first_attempt(viewer_client):
    r = completed("k1")
    for ms in (120, 85):
        Attempt.record(r, outcome=Attempt.Outcome.WAITED, waited_ms=ms, created_at=timezone.now())
    html = viewer_client.get(f"/receipts/{r.pk}/").content.decode()
    assert html.count("badge-outcome-waited") == 2
    assert "waited 120 ms for the first attempt" in html and "waited 85 ms for the first attempt" in html


def test_its_audit_block_names_the_receipt_by_key_as_the_audit_log_does(viewer_client):
    from receipts import store
    from receipts.models import Receipt

    f = failed("audit-named")
    store.release(Receipt.objects.get(pk=f.pk), actor="otto", reason="card fixed")
    html = viewer_client.get(f"/receipts/{f.pk}/").content.decode()
    assert 'title="audit-named">audit-named</a>' in html
    assert f"receipt {f.pk}</a>" not in html


def test_an_operators_release_is_marked_on_the_timeline_between_the_attempts(viewer_client, time_machine):
    from receipts import store

    time_machine.move_to(timezone.now(), tick=False)
    r = failed("k1", retryable=False)
    time_machine.shift(timedelta(seconds=5))
    store.release(r, actor="otto", reason="card issuer back")
    time_machine.shift(timedelta(seconds=5))
    store.claim("client:shop", "k1", "payment.create", {"key": "k1"})
    html = viewer_client.get(f"/receipts/{r.pk}/").content.decode()
    log = html.split('id="receipt-timeline"')[1].split("</section>")[0]
    mark = log.split('data-role="operator-mark"')[1].split("</li>")[0]
    assert "operator: Release" in mark and "<strong>otto</strong>" in mark and "“card issuer back”" in mark
    assert log.index("badge-outcome-failed") < log.index('data-role="operator-mark"') < log.index(
        "badge-outcome-retried_after_failure")
    assert "numbering starts again" not in mark  # a release keeps the receipt's attempts


def test_it_shows_the_receipts_references_and_links_to_the_messages_its_step_enqueued(viewer_client):
    from tests.dashboard.build import charged

    receipt, message = charged("order-1042", "ch_3MtwBw")
    html = viewer_client.get(f"/receipts/{receipt.pk}/").content.decode()
    assert 'data-reference="stripe.charge:ch_3MtwBw"' in html and 'data-reference="order:1042"' in html
    assert '/receipts/?ref=ch_3MtwBw' in html and '/events/?ref=ch_3MtwBw' in html and '/outbox/?ref=ch_3MtwBw' in html
    assert f'<a href="/outbox/{message.pk}/"><code class="break">receipt-mail-ch_3MtwBw</code></a>' in html


def test_a_receipt_without_references_or_messages_says_so(viewer_client):
    r = completed("k1")
    html = viewer_client.get(f"/receipts/{r.pk}/").content.decode()
    assert "No references: the step attached none" in html and "no outbox message was enqueued while it ran" in html


def test_a_compacted_receipt_says_its_body_was_dropped_and_when(viewer_client, settings):
    settings.RECEIPTS_OPERATIONS = {"payment.create": {"compact_after_seconds": 3600}}
    from receipts import compaction

    r = mismatched("k1", {"amount": 500, "currency": "eur"}, {"amount": 900, "currency": "eur"})
    compaction.compact(now=timezone.now() + timedelta(hours=2))
    r.refresh_from_db()
    html = viewer_client.get(f"/receipts/{r.pk}/").content.decode()
    assert 'id="response-compacted">Body dropped by compaction at' in html and "410 receipt-compacted" in html
    assert 'id="request-compacted">Request body dropped by compaction at' in html
    assert "&quot;id&quot;: &quot;ch_1&quot;" not in html and "HTTP 201" in html  # the status is kept
    assert "bodies compacted after" in html  # the policy says so
    # The rejected request is shown as sent, with no diff against a request that is gone.
    assert "The stored request was dropped by compaction" in html and "badge-muted\">changed" not in html


def test_a_fresh_key_retry_is_marked_on_both_receipts_with_the_other_key(viewer_client):
    from receipts import store

    with time_machine.travel(timezone.now(), tick=False) as traveller:
        first = store.claim("client:shop", "k1", "refund.create", {"order": 7}).receipt
        traveller.shift(3.2)
        again = store.claim("client:shop", "k2", "refund.create", {"order": 7}).receipt
    store.claim("client:shop", "k3", "refund.create", {"order": 8})  # another request: not marked
    first_page = viewer_client.get(f"/receipts/{first.pk}/").content.decode()
    again_page = viewer_client.get(f"/receipts/{again.pk}/").content.decode()
    assert f'the same request as <a href="/receipts/{again.pk}/">k2</a>, 3.2 s later' in first_page
    assert f'the same request as <a href="/receipts/{first.pk}/">k1</a>, 3.2 s earlier' in again_page
    # Another request is not marked (a key as the page would link it; a bare "k3" may be in a token).
    assert ">k3</a>" not in first_page and "fresh key: <strong>allow</strong>" in first_page
