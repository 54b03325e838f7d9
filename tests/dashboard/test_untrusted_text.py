"""Caller and operator text on pages, in the admin and in notifications cannot deceive: the
`|untrusted` filter on every template that shows it inline, the middleware on every HTML
response, `isolated_plain` in notifications (idemdash/core/caller_text.py)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.test import Client

from idemdash.core.caller_text import FSI, PDI
from idemdash.dashboard import alerts
from idemdash.dashboard.models import AlertRule, Incident
from receipts import store
from receipts.models import Receipt
from receipts.outbox.models import OutboxMessage
from tests.dashboard.build import failed, stuck

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"
RLO = "\u202e"
EVIL = f"Payments {RLO}deliaf"  # reads "Payments failed" reversed, and would flip what follows

# What callers and operators write, by the attribute a template shows it from: keys, scopes,
# error texts, reasons, notes, rule names, actors, audit details.
CALLER_FIELDS = (r"rule_name|rule\.name|error|last_error|release_reason|released_by|acknowledged_by|note|actor|detail"
                 r"|key|scope|dedupe_key|event_id|subject\.name|subject\.scope")
SHOWN = re.compile(r"\{\{\s*(?P<expr>(?:[a-z_]+\.)+(?:" + CALLER_FIELDS + r")(?:\|[^}]*)?)\s*\}\}")


def _in_tag(text: str, pos: int) -> bool:
    return text.rfind("<", 0, pos) > text.rfind(">", 0, pos)


def _in_title(text: str, pos: int) -> bool:
    start = text.rfind("{% block title %}", 0, pos)
    return start != -1 and text.find("{% endblock %}", start) > pos


def caller_text_shown_without_the_filter(root: Path = TEMPLATES) -> list[str]:
    """Each `{{ x.<caller field> }}` in a template's text (not in a tag's attributes, whose
    values the middleware covers, nor in the <title>, which is not HTML) whose last filter
    is not `untrusted` (a `linebreaksbr` after it is allowed)."""
    missing = []
    for path in sorted(root.rglob("*.html")):
        text = path.read_text()
        for m in SHOWN.finditer(text):
            expr = m["expr"].strip()
            if expr.startswith(("form.", "field.")) or _in_tag(text, m.start()) or _in_title(text, m.start()):
                continue
            filters = [f.split(":")[0].strip() for f in expr.split("|")[1:]]
            if filters and filters[-1] == "linebreaksbr":
                filters.pop()
            if not filters or filters[-1] != "untrusted":
                missing.append(f"{path.relative_to(root)}: {{{{ {expr} }}}}")
    return missing


def test_every_template_shows_caller_text_through_the_untrusted_filter():
    assert caller_text_shown_without_the_filter() == []


def test_the_template_check_finds_caller_text_shown_without_the_filter(tmp_path):
    (tmp_path / "page.html").write_text(
        '{% block title %}{{ r.key }}{% endblock %}<p title="{{ r.key }}">{{ r.key }} {{ a.note|untrusted }} '
        '{{ x.error|masked }} {{ e.detail|untrusted|linebreaksbr }}</p>'
    )
    assert caller_text_shown_without_the_filter(tmp_path) == ["page.html: {{ r.key }}", "page.html: {{ x.error|masked }}"]


# --- rendered pages --------------------------------------------------------------------------


def evil_rule_firing() -> Incident:
    """A rule named with a RIGHT-TO-LEFT OVERRIDE, firing; and a receipt whose error text, sent
    by its caller, holds one (keys are printable ASCII, refused otherwise by receipts.store)."""
    AlertRule.objects.create(name=EVIL, metric="stuck_rows", threshold=0, window_minutes=60,
                             channel="email", target="ops@example.com")
    stuck("key-1")
    receipt = failed("order-1")
    Receipt.objects.filter(pk=receipt.pk).update(error=f"card {RLO}deniced")
    alerts.evaluate()
    return Incident.objects.get()


def receipt_pk() -> int:
    return Receipt.objects.get(key="order-1").pk


def _banner(body: str) -> str:
    return body[body.index('<section class="alert-panel'):body.index("</section>", body.index('<section class="alert-panel'))]


@pytest.mark.django_db
def test_the_banner_isolates_and_marks_a_rule_name_even_without_the_middleware(viewer_client, settings):
    settings.MIDDLEWARE = [m for m in settings.MIDDLEWARE if not m.endswith("RevealHiddenTextMiddleware")]
    evil_rule_firing()
    banner = _banner(viewer_client.get("/?window=1h").content.decode())
    assert RLO not in banner
    assert '<bdi>Payments <span class="hidden-char" title="[U+202E] RIGHT-TO-LEFT OVERRIDE">[U+202E]</span>deliaf</bdi>' in banner


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/?window=1h", "/alerts/", "/alerts/rules/", "/incidents/", "/incidents/{pk}/",
                                  "/receipts/{receipt}/", "/audit/"])
def test_no_page_carries_a_bidi_control_from_data(operator_client, path):
    incident = evil_rule_firing()
    operator_client.post(f"/incidents/{incident.pk}/acknowledge/", {"note": f"on it {RLO}kO"})
    body = operator_client.get(path.format(pk=incident.pk, receipt=receipt_pk())).content.decode()
    assert RLO not in body
    assert "[U+202E]" in body


@pytest.mark.django_db
def test_a_callers_error_text_on_a_receipt_is_shown_marked_not_reversed(operator_client):
    receipt = failed("order-1")
    Receipt.objects.filter(pk=receipt.pk).update(error=f"card {RLO}deniced")
    body = operator_client.get(f"/receipts/{receipt.pk}/").content.decode()
    assert RLO not in body
    assert 'card <span class="hidden-char" title="[U+202E] RIGHT-TO-LEFT OVERRIDE">[U+202E]</span>deniced' in body


# --- the admin -------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/admin/idemdash_dashboard/alert/", "/admin/idemdash_dashboard/alert/{pk}/change/",
                                  "/admin/idemdash_dashboard/alertrule/", "/admin/idemdash_dashboard/incident/",
                                  "/admin/idemdash_dashboard/incident/{pk}/change/", "/admin/receipts/receipt/{receipt}/change/"])
def test_no_admin_page_carries_a_bidi_control_from_data(admin_client, path):
    incident = evil_rule_firing()
    page = admin_client.get(path.format(pk=incident.pk, receipt=receipt_pk()))
    assert page.status_code == 200
    body = page.content.decode()
    assert RLO not in body and "[U+202E]" in body


@pytest.mark.django_db
def test_the_admin_has_the_dashboards_favicon(admin_client):
    body = admin_client.get("/admin/").content.decode()
    assert '<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">' in body
    login = Client().get("/admin/login/").content.decode()
    assert 'href="/static/favicon.svg"' in login


# --- notifications ---------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_notification_marks_a_bidi_control_in_a_rule_name():
    evil_rule_firing()
    payload = OutboxMessage.objects.get().payload
    assert RLO not in payload["subject"] + payload["body"]
    assert payload["subject"].startswith("[idemdash] [FIRING] Payments [U+202E]deliaf: Stuck rows")


@pytest.mark.django_db
def test_a_right_to_left_rule_name_is_isolated_in_a_notification_so_it_cannot_reorder_the_figures():
    AlertRule.objects.create(name="תשלומים", metric="stuck_rows", threshold=0, window_minutes=60,
                             channel="webhook", target="https://hooks.slack.com/services/T/B/X")
    receipt = stuck("r1")
    alerts.evaluate()
    store.release(receipt, actor="otto")
    alerts.evaluate()
    texts = [m.payload["json"]["text"] for m in OutboxMessage.objects.order_by("id")]
    assert [t.split(":")[0] for t in texts] == [f"[FIRING] {FSI}תשלומים{PDI}", f"[RESOLVED] {FSI}תשלומים{PDI}"]
