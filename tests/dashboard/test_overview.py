from __future__ import annotations

import re

import pytest

from datetime import timedelta

from django.utils import timezone

from receipts.models import ObservedRequest
from tests.dashboard.build import completed

pytestmark = pytest.mark.django_db


def test_the_overview_shows_tiles_charts_and_loads_plotly_once(viewer_client):
    completed("k1")
    response = viewer_client.get("/")
    html = response.content.decode()
    assert response.status_code == 200
    assert html.count("/static/vendor/plotly.min.js") == 1
    assert len(re.findall(r'data-chart="chart-[a-z-]+-data"', html)) == 10
    assert 'data-figure="receipts.requests"' in html
    assert 'data-chart="chart-unprotected-data"' in html and 'data-chart="chart-fresh-keys-data"' in html
    assert 'hx-trigger="every 15s' in html


def test_the_would_be_duplicates_tile_counts_them_says_their_share_and_links_to_coverage(viewer_client, settings):
    settings.RECEIPTS_OBSERVE_WINDOW_SECONDS = 600
    now = timezone.now()
    for minutes, fingerprint in ((30, "a"), (29, "a"), (20, "b"), (19, "c")):
        ObservedRequest.objects.create(method="POST", route="notes/", caller="anonymous", fingerprint=fingerprint,
                                       at=now - timedelta(minutes=minutes))
    html = viewer_client.get("/?window=1h").content.decode()
    tile = re.search(r'<a class="tile[^"]*" data-figure="unprotected.duplicates".*?</a>', html, re.S).group(0)
    assert 'href="/coverage/"' in tile and 'class="tile-label">Would-be duplicates<' in tile
    assert '<span class="tile-value">1</span>' in tile
    assert ('25% of <span data-figure="unprotected.requests">4</span> write requests to routes nothing protects: '
            "the same caller sent the same request within 10 min, and it ran again") in tile
    assert 'data-health="' in tile  # coloured by the health check unprotected.duplicates


def test_the_fresh_key_tile_counts_the_retries_that_ran_again_and_those_refused(viewer_client, settings):
    from receipts import store

    settings.RECEIPTS_OPERATIONS = {"refund.*": {"fresh_key": "refuse"}}
    store.claim("client:app", "k1", "email.send", {"to": "a"})
    store.claim("client:app", "k2", "email.send", {"to": "a"})  # allowed: it ran again
    store.claim("client:app", "k3", "refund.create", {"order": 1})
    store.claim("client:app", "k4", "refund.create", {"order": 1})  # refused
    html = viewer_client.get("/?window=1h").content.decode()
    tile = re.search(r'<a class="tile[^"]*" data-figure="fresh_keys.ran_again".*?</a>', html, re.S).group(0)
    assert 'href="/coverage/#coverage-fresh-keys"' in tile and '<span class="tile-value">1</span>' in tile
    assert ("protected requests sent again under a new key within 10 min, which ran again · "
            '<span data-figure="fresh_keys.refused">1</span> refused (409)') in tile
    assert 'data-health="bad"' in tile  # one of the three claims that ran: over 5%


@pytest.mark.parametrize("window", ["1h", "24h", "7d", "30d"])
def test_the_chosen_window_is_kept_by_the_polling_request(viewer_client, window):
    html = viewer_client.get(f"/?window={window}").content.decode()
    assert f'hx-get="/?window={window}" hx-trigger="every 15s' in html
    assert f'href="/?window={window}"' in html and 'aria-current="true">' + window in html


def test_an_htmx_request_gets_the_figures_fragment_only(viewer_client):
    response = viewer_client.get("/?window=1h", headers={"HX-Request": "true"})
    html = response.content.decode()
    assert html.lstrip().startswith('<div id="overview-figures"')
    assert "<html" not in html and "plotly.min.js" not in html


# What the overview shows, one parameter a case (the log is empty): the URL and the texts it must show.
@pytest.mark.parametrize("url,shown", [
    pytest.param("/?window=2h", ["window must be one of", 'hx-get="/?window=1h"'],
                 id="an unknown window falls back to the default and says so"),
    pytest.param("/", ['hx-get="/?window=1h"', 'aria-current="true">1h'], id="a fresh session opens on the last hour"),
    pytest.param("/", ["No claim requests in the last 1h", "Idempotency-Key"],
                 id="an empty log tells the operator where receipts come from"),
    pytest.param("/?window=24h", ["No webhook deliveries and no outbox messages in the last 24h",
                                  "No claim requests in the last 24h"],
                 id="an empty overview says how to get webhook and outbox figures"),
    pytest.param("/", ['data-empty="No webhook deliveries in the last 1h"', 'data-empty="No claim requests in the last 1h"'],
                 id="each empty chart carries its reason"),
    # Each poll swaps the charts out; under the pointer that would wipe the hover box.
    # (static/js/idemdash.js: not an hx-trigger filter, which htmx would run as code, refused by the CSP)
    pytest.param("/", ['hx-trigger="every 15s" data-poll-waits-while=".chart-plot:hover"'],
                 id="the poll pauses while the pointer is on a chart"),
])
def test_the_overview_says(viewer_client, url, shown):
    html = viewer_client.get(url).content.decode()
    for text in shown:
        assert text in html, text


def test_the_window_picked_is_kept_by_the_session_for_the_next_visit(viewer_client, client, viewer):
    viewer_client.get("/?window=7d")
    assert 'aria-current="true">7d' in viewer_client.get("/").content.decode()
    # A bad window neither changes nor loses the choice.
    assert 'aria-current="true">7d' in viewer_client.get("/?window=2h").content.decode()
    assert 'aria-current="true">7d' in viewer_client.get("/").content.decode()
    # Another session (the same user in another browser) starts from the default.
    client.force_login(viewer)
    assert 'aria-current="true">1h' in client.get("/").content.decode()
