from __future__ import annotations

import re

import pytest

from tests.webhooks.conftest import STRIPE_SECRET, deliver_stripe, make_endpoint, stripe_event

pytestmark = pytest.mark.django_db


@pytest.fixture
def rejections(client):
    make_endpoint("stripe", "stripe", STRIPE_SECRET)
    make_endpoint("other", "stripe", STRIPE_SECRET)
    assert deliver_stripe(client, "stripe", stripe_event({"id": "ch_1"}, "charge.succeeded"), secret="whsec_wrong").status_code == 400
    assert client.post("/webhooks/other/", data=b"{}", content_type="application/json").status_code == 400


def causes(html: str) -> list[str]:
    return re.findall(r'<span class="badge badge-failed">(\w+)</span>', html)


def test_it_lists_rejections_with_their_cause_and_excerpt_but_no_secret(viewer_client, rejections):
    html = viewer_client.get("/rejected/").content.decode()
    assert causes(html) == ["missing_header", "no_matching_signature"]
    assert "&quot;object&quot;: &quot;event&quot;" in html  # the body excerpt
    assert STRIPE_SECRET not in html and "whsec_wrong" not in html and "v1=" not in html


@pytest.mark.parametrize("query,expected", [
    ("endpoint=other", ["missing_header"]),
    ("cause=no_matching_signature", ["no_matching_signature"]),
    ("provider=shopify", []),
])
def test_each_filter_narrows_the_list(viewer_client, rejections, query, expected):
    assert causes(viewer_client.get(f"/rejected/?{query}").content.decode()) == expected


def test_no_rejections_says_what_it_means(viewer_client):
    assert "Every delivery so far passed verification" in viewer_client.get("/rejected/").content.decode()
