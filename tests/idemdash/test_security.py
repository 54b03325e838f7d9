"""idemdash/security.py: the Content-Security-Policy on the pages, not on the APIs' answers
(the pages under it in a browser: tests/dashboard/test_browser_csp.py)."""

from __future__ import annotations

import pytest


@pytest.mark.django_db
def test_pages_carry_the_policy_and_the_apis_answers_do_not(client):
    page = client.get("/accounts/login/")
    assert "default-src 'self'" in page["Content-Security-Policy"]
    for path in ("/api/v1/receipts/?key=k", "/api/v1/nowhere", "/webhooks/nowhere/"):
        answer = client.get(path)
        assert answer["Content-Type"] == "application/problem+json", path
        assert "Content-Security-Policy" not in answer, path
