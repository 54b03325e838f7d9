from __future__ import annotations

import pytest

from idemdash.core import audit
from receipts import store
from idemdash.core.models import AuditEntry
from receipts.models import Receipt
from tests.dashboard.build import failed

pytestmark = pytest.mark.django_db


def test_it_lists_operator_actions_newest_first_with_status_before_and_after(viewer_client, operator):
    a = failed("a", retryable=False)
    b = failed("b", retryable=False)
    store.release(a, actor="otto", user=operator, reason="reason-alpha")
    store.release(b, actor="otto", user=operator, reason="reason-beta")
    html = viewer_client.get("/audit/").content.decode()
    assert html.index("reason-beta") < html.index("reason-alpha")
    assert f'href="/receipts/{a.pk}/" title="a">a</a> <span class="muted small">client:shop</span>' in html
    assert '<td title="receipt.release">Release</td>' in html
    assert '<span class="badge badge-failed">failed</span> → <span class="badge badge-released">released</span>' in html


def test_an_entry_written_before_the_release_marker_still_reads_released(viewer_client, operator):
    audit.record("otto", "receipt.release", failed("a"), "failed", "failed", "old entry")
    html = viewer_client.get("/audit/").content.decode()
    assert '→ <span class="badge badge-released">released</span>' in html


def test_it_filters_by_actor_action_and_entry_range(viewer_client, operator):
    for i in range(4):
        audit.record("otto" if i % 2 else "ada", "test.action", operator, detail=f"entry-{i}")
    first = AuditEntry.objects.order_by("id").first().pk
    html = viewer_client.get(f"/audit/?actor=otto&action=test.action&after_id={first}&through_id={first + 2}").content.decode()
    assert "entry-1" in html and "entry-0" not in html and "entry-2" not in html and "entry-3" not in html
    assert "Only entries with who <strong>otto</strong>, action <strong>test.action</strong>" in html
    response = viewer_client.get("/audit/?after_id=x")
    assert response.status_code == 400 and "After entry: " in response.content.decode()


def test_an_entry_reads_by_its_verb_and_the_filter_finds_it_by_its_action_name(viewer_client):
    from tests.dashboard.build import outbox_message

    message = outbox_message("m1", "pending")
    audit.record("otto", "outbox_message.send_again", message, "dead", "pending", "sent-again")
    audit.record("otto", "outbox_message.send_now", message, "retry", "pending", "sent-now")
    html = viewer_client.get("/audit/").content.decode()
    assert '<td title="outbox_message.send_again">Send again</td>' in html
    html = viewer_client.get("/audit/?action=outbox_message.send_again").content.decode()
    assert "sent-again" in html and "sent-now" not in html
    assert "action <strong>Send again</strong>" in html


def test_the_action_filter_takes_the_verb_the_log_shows_in_any_case(viewer_client):
    from tests.dashboard.build import failed, outbox_message

    audit.record("otto", "receipt.release", failed("k1"), "failed", "released", "released-it")
    audit.record("otto", "outbox_message.release", outbox_message("m1", "in_flight"), "in_flight", "retry", "freed-it")
    for verb in ("Release", "release", " RELEASE "):
        html = viewer_client.get("/audit/", {"action": verb}).content.decode()
        assert "released-it" in html and "freed-it" not in html, verb
    html = viewer_client.get("/audit/", {"action": "Release (stuck)"}).content.decode()
    assert "freed-it" in html and "released-it" not in html
    assert '<option value="Release">' in viewer_client.get("/audit/").content.decode()  # suggested as shown


def test_every_action_the_code_records_has_a_verb():
    import re
    from pathlib import Path

    from idemdash.dashboard.queries import AUDIT_VERBS

    root = Path(__file__).resolve().parents[2]
    recorded = set()
    for package in ("idemdash", "receipts", "webhooks"):
        for source in (root / package).rglob("*.py"):
            for line in source.read_text().splitlines():
                if "record(" in line or "audit_action" in line or "Repair(" in line:
                    recorded |= set(re.findall(r'"([a-z_]+\.[a-z_]+)"', line))
    assert {"receipt.release", "alert_rule.update", "demo_switch.fix", "outbox_message.send_now"} <= recorded
    assert recorded - set(AUDIT_VERBS) == set()


def test_a_pause_entry_names_its_kind_as_an_operator_knows_it(viewer_client, settings):
    from receipts.outbox import pauses

    settings.OUTBOX_HTTP_ALLOWED_HOSTS = ["partner.example.com"]
    pauses.pause("host", "partner.example.com", actor="otto", note="403s")
    html = viewer_client.get("/audit/").content.decode()
    subject = html.split('data-role="subject">')[1].split("</td>")[0]
    assert '<span class="muted small">outbox pause</span>' in subject and "outboxpause" not in subject


def test_it_pages_backwards_by_id(viewer_client, operator, monkeypatch):
    for i in range(55):
        audit.record("otto", "test.action", operator, detail=f"entry-{i:02d}")
    first = viewer_client.get("/audit/").content.decode()
    assert "entry-54" in first and "entry-04" not in first
    before = first.split('?before=')[1].split('"')[0]
    second = viewer_client.get(f"/audit/?before={before}").content.decode()
    assert "entry-04" in second and "entry-54" not in second


def test_an_empty_log_says_what_will_appear(viewer_client):
    assert "No operator actions yet" in viewer_client.get("/audit/").content.decode()


def test_webhook_event_and_outbox_message_entries_link_to_their_pages(viewer_client):
    from receipts.outbox import store as outbox_store
    from tests.dashboard.build import outbox_message, webhook_event
    from webhooks import processing

    event = webhook_event("evt_1", "dead")
    processing.reprocess(event, actor="otto")
    message = outbox_message("m1", "dead")
    outbox_store.send_again(message, actor="otto")
    html = viewer_client.get("/audit/").content.decode()
    assert f'webhook event</span> <a class="key" href="/events/{event.pk}/" title="evt_1">evt_1</a>' in html
    assert f'outbox message</span> <a class="key" href="/outbox/{message.pk}/" title="m1">m1</a>' in html


def test_an_entry_whose_object_was_purged_keeps_the_name_it_was_written_with_without_a_link(viewer_client, operator):
    a = failed("gone-key", retryable=False)
    store.release(a, actor="otto", user=operator, reason="r")
    Receipt.objects.filter(pk=a.pk).delete()
    html = viewer_client.get("/audit/").content.decode()
    assert '<span class="key">gone-key</span> <span class="muted small">(no longer stored)</span>' in html
    assert f'href="/receipts/{a.pk}/"' not in html


def test_objects_are_named_in_one_query_per_kind(viewer_client, operator, django_assert_max_num_queries):
    from receipts.outbox import store as outbox_store
    from tests.dashboard.build import outbox_message

    dead = [outbox_message(f"m{i}", "dead") for i in range(6)]
    for i, message in enumerate(dead):
        store.release(failed(f"k{i}", retryable=False), actor="otto", user=operator, reason="r")
        outbox_store.send_again(message, actor="otto")
    viewer_client.get("/audit/")
    with django_assert_max_num_queries(7):  # session, user, 2 x permissions, entries, then one per kind
        html = viewer_client.get("/audit/").content.decode()
    assert html.count('class="key" href="/receipts/') == 6
    assert html.count('class="key" href="/outbox/') == 6


def test_other_kinds_keep_their_type_and_the_name_they_were_written_with(viewer_client, operator):
    audit.record("otto", "test.action", operator, detail="x")
    html = viewer_client.get("/audit/").content.decode()
    assert f'auth.user</span> <span class="key">{operator.username}</span></td>' in html


def test_it_filters_by_kind_object_and_time(viewer_client, operator, time_machine):
    from datetime import datetime, timezone as tz

    from receipts.outbox import store as outbox_store
    from tests.dashboard.build import outbox_message

    time_machine.move_to(datetime(2026, 5, 1, 10, 0, tzinfo=tz.utc), tick=False)
    store.release(failed("pay-early", retryable=False), actor="otto", user=operator, reason="early")
    time_machine.move_to(datetime(2026, 5, 1, 12, 0, tzinfo=tz.utc), tick=False)
    store.release(failed("pay-late", retryable=False), actor="otto", user=operator, reason="late")
    outbox_store.send_again(outbox_message("msg-late", "dead"), actor="ada", reason="message")

    def reasons(query: str) -> set[str]:
        html = viewer_client.get(f"/audit/?{query}").content.decode()
        return {r for r in ("early", "late", "message") if f"<td class=\"hide-sm\">{r}</td>" in html}

    assert reasons("kind=receipts.receipt") == {"early", "late"}
    assert reasons("kind=outbox.outboxmessage") == {"message"}
    assert reasons("object=pay-early") == {"early"}
    assert reasons("since=2026-05-01T11:00") == {"late", "message"}
    assert reasons("until=2026-05-01T11:00") == {"early"}
    assert reasons("actor=ada&kind=receipts.receipt") == set()


def test_the_filter_form_keeps_its_values_and_the_table_refreshes_with_them(viewer_client, operator):
    store.release(failed("pay-1", retryable=False), actor="otto", user=operator, reason="r")
    html = viewer_client.get("/audit/?object=pay-1&kind=receipts.receipt").content.decode()
    assert 'name="object" value="pay-1"' in html and '<option value="receipts.receipt" selected>' in html
    assert 'hx-get="/audit/?object=pay-1&amp;kind=receipts.receipt" hx-trigger="every 10s"' in html
    fragment = viewer_client.get("/audit/?object=pay-1", headers={"HX-Request": "true"}).content.decode()
    assert fragment.startswith('\n<div id="audit-table"') and "<form" not in fragment


def test_a_deleted_alert_rule_is_named_by_its_name(viewer_client, operator):
    from idemdash.dashboard.models import AlertRule

    rule = AlertRule.objects.create(name="Payments failing", metric="failed_keys", threshold=1, channel="email",
                                    target="ops@example.com")
    audit.record("otto", "alert_rule.delete", rule, status_after="deleted")
    rule.delete()
    html = viewer_client.get("/audit/?kind=idemdash_dashboard.alertrule").content.decode()
    assert '<span class="muted small">alert rule</span> <span class="key">Payments failing</span>' in html


@pytest.mark.parametrize("query", ["run=0", "run=x", f"run={'9' * 40}", "kind=nope", "since=yesterday", "object=a%00b"])
def test_a_bad_filter_is_a_400_never_a_500(viewer_client, query):
    assert viewer_client.get(f"/audit/?{query}").status_code == 400
