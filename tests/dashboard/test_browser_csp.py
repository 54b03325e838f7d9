"""The dashboard under its Content-Security-Policy (idemdash/settings.py, CSP_DIRECTIVES), in
a real browser: Debian's Chromium driven by Playwright walks the login, the overview with its
charts (and a hover), a change of window and a filter by htmx, the lists, the detail pages,
an action done in place by htmx, the alert pages and the admin, and no violation may reach
either the page (`securitypolicyviolation`) or the console.

Screenshots go to var/screenshots/csp-*.png."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.dashboard.test_browser import (  # noqa: F401 (fixtures)
    SHOTS, act_in_place, browser, charts_drawn, flow, operator, read_in_place, receipts,
)
from receipts.models import Receipt
from tests.waits import until

pytestmark = [pytest.mark.slow, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Reports every violation the page sees to the test, on every document the page loads.
REPORT_VIOLATIONS = """
document.addEventListener("securitypolicyviolation", (e) => {
  window.__reportViolation([e.violatedDirective, e.blockedURI, e.sourceFile + ":" + e.lineNumber].join(" "));
});
"""


@pytest.fixture
def watched(browser, operator, live_server):  # noqa: F811
    # Staff too, so that the admin's pages are walked as well, not its login.
    operator.is_staff = operator.is_superuser = True
    operator.save()
    """A page whose CSP violations and console errors are collected; the CSP header of every
    document it loads is kept too."""
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    page.set_default_timeout(15_000)
    violations: list[str] = []
    console: list[str] = []
    policies: dict[str, str | None] = {}
    page.expose_function("__reportViolation", lambda text: violations.append(text))
    page.add_init_script(REPORT_VIOLATIONS)
    page.on("console", lambda m: console.append(f"{m.type}: {m.text}") if m.type in ("error", "warning") else None)
    page.on("response", lambda r: policies.__setitem__(r.url, r.headers.get("content-security-policy"))
            if r.request.resource_type == "document" else None)
    page.violations, page.console_errors, page.policies = violations, console, policies
    return page


def _log_in(page, live_server, path: str = "/") -> None:
    page.goto(live_server.url + path)
    page.fill("input[name=username]", "otto")
    page.fill("input[name=password]", "pw-otto-browser")
    page.click("button[type=submit]")
    page.wait_for_url(f"**{path}")


def _clean(page) -> None:
    assert page.violations == [], "\n".join(sorted(set(page.violations)))
    assert [c for c in page.console_errors if "Content Security Policy" in c or "Refused" in c] == []
    assert page.policies and all(page.policies.values()), page.policies


def test_every_page_works_under_the_policy_with_no_violation(receipts, flow, watched, live_server):  # noqa: F811
    page = watched
    burned, dead = receipts["burned"], flow["dead"]
    _log_in(page, live_server)

    # The overview: every chart drawn, then a hover (Plotly styles its tooltip as it goes).
    charts_drawn(page, 6)
    chart = page.locator("#chart-traffic")
    bar = chart.locator(".barlayer .point path").last
    # The overview's first line (health problems) may push the charts below the fold.
    bar.scroll_into_view_if_needed()
    box = bar.bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    chart.locator(".hoverlayer .legend").wait_for(state="visible", timeout=5_000)
    page.screenshot(path=SHOTS / "csp-overview.png", full_page=True)

    # A change of window: htmx swaps the figures in, and the charts are drawn again.
    page.click('.segmented a:text("24h")')
    page.wait_for_url("**/?window=24h")
    charts_drawn(page, 6)

    # A list filtered by htmx, the detail page, and a release done in place.
    page.goto(live_server.url + "/receipts/")
    page.select_option("select[name=status]", "failed")
    page.wait_for_url("**/receipts/?*status=failed*")
    expect(page.locator("#receipt-table td.key")).to_have_count(2)
    page.click("text=order-burned")
    page.wait_for_url(f"**/receipts/{burned.pk}/")
    act_in_place(page, "#receipt-actions >> text=Release…", "customer called", "Confirm release", ".alert-success")
    page.screenshot(path=SHOTS / "csp-receipt-released.png", full_page=True)
    assert read_in_place(lambda: Receipt.objects.get(pk=burned.pk).retryable) is True

    for path in ("/events/", f"/events/{dead.pk}/", "/rejected/", "/outbox/", "/stuck/", "/audit/", "/alerts/",
                 "/alerts/rules/", "/alerts/rules/new/", "/incidents/", "/receipts/bulk-release/", "/admin/",
                 "/admin/receipts/receipt/", f"/admin/receipts/receipt/{burned.pk}/change/"):
        response = page.goto(live_server.url + path)
        assert response.status == 200 and page.url == live_server.url + path, path
        page.wait_for_load_state("load")
    page.goto(live_server.url + "/outbox/?status=dead")
    page.click("text=crm-sync-7")
    page.wait_for_selector("#outboxmessage-summary")
    page.screenshot(path=SHOTS / "csp-message.png", full_page=True)
    _clean(page)


def test_the_policy_refuses_what_it_should(watched, live_server):
    """The check above could pass because nothing was checked: here an inline script, a
    style attribute and a foreign script are each refused and reported."""
    page = watched
    page.goto(live_server.url + "/accounts/login/")
    page.evaluate("""() => {
      const s = document.createElement("script"); s.textContent = "window.__ran = true"; document.body.append(s);
      const f = document.createElement("script"); f.src = "https://cdn.example.invalid/x.js"; document.body.append(f);
      document.body.setAttribute("style", "color: red");
    }""")
    # The reports come as Playwright's events, delivered while it is called: each look lets the
    # page run for 20 ms, until the three have come.
    until(lambda: page.wait_for_timeout(20) or len(page.violations) >= 3, "the three violations reported")
    assert page.evaluate("window.__ran === undefined")
    directives = sorted(v.split()[0] for v in page.violations)
    assert directives == ["script-src-elem", "script-src-elem", "style-src-attr"], page.violations
    policy = page.policies[live_server.url + "/accounts/login/"]
    assert "default-src 'self'" in policy and "frame-ancestors 'none'" in policy and "object-src 'none'" in policy


def test_the_lockout_page_says_what_happened_under_the_policy(watched, live_server):
    page = watched
    page.goto(live_server.url + "/accounts/login/")
    for _ in range(5):  # LOGIN_FAILURE_LIMIT's default: the fifth failure locks
        page.fill("input[name=username]", "otto")
        page.fill("input[name=password]", "not-the-password")
        with page.expect_navigation():
            page.click("button[type=submit]")
        if page.locator('[data-role="locked-out"]').count():
            break
        page.goto(live_server.url + "/accounts/login/")
    text = page.inner_text('[data-role="locked-out"]')
    assert "After 5 failed logins as otto" in text and "15 min" in text, text
    page.screenshot(path=SHOTS / "csp-locked-out.png", full_page=True)
    _clean(page)
