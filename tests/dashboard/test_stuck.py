from __future__ import annotations

import re

import pytest

from tests.dashboard.build import completed, stuck

pytestmark = pytest.mark.django_db


def test_it_lists_stuck_receipts_oldest_first(viewer_client):
    stuck("newer", minutes_ago=5)
    stuck("older", minutes_ago=50)
    completed("done")
    html = viewer_client.get("/stuck/").content.decode()
    assert re.findall(r'<td class="key"><a [^>]+>([^<]+)<', html) == ["older", "newer"]


def test_operators_get_a_release_link_that_returns_here(operator_client, viewer_client):
    r = stuck("k1")
    assert f'href="/receipts/{r.pk}/release/?next=/stuck/"' in operator_client.get("/stuck/").content.decode()
    assert "Release…" not in viewer_client.get("/stuck/").content.decode()


def test_nothing_stuck_says_so(viewer_client):
    assert "Nothing is stuck" in viewer_client.get("/stuck/").content.decode()
