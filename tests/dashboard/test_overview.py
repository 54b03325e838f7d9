from __future__ import annotations

import re

import pytest

from tests.dashboard.build import completed

pytestmark = pytest.mark.django_db


def test_the_overview_shows_tiles_charts_and_loads_plotly_once(viewer_client):
    completed("k1")
    response = viewer_client.get("/")
    html = response.content.decode()
    assert response.status_code == 200
    assert html.count("/static/vendor/plotly.min.js") == 1
    assert len(re.findall(r'data-chart="chart-[a-z]+-data"', html)) == 6
    assert 'data-figure="receipts.requests"' in html
    assert 'hx-trigger="every 15s' in html


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


def test_an_unknown_window_falls_back_to_the_default_and_says_so(viewer_client):
    html = viewer_client.get("/?window=2h").content.decode()
    assert "window must be one of" in html
    assert 'hx-get="/?window=1h"' in html


def test_a_fresh_session_opens_on_the_last_hour(viewer_client):
    html = viewer_client.get("/").content.decode()
    assert 'hx-get="/?window=1h"' in html and 'aria-current="true">1h' in html


def test_the_window_picked_is_kept_by_the_session_for_the_next_visit(viewer_client, client, viewer):
    viewer_client.get("/?window=7d")
    assert 'aria-current="true">7d' in viewer_client.get("/").content.decode()
    # A bad window neither changes nor loses the choice.
    assert 'aria-current="true">7d' in viewer_client.get("/?window=2h").content.decode()
    assert 'aria-current="true">7d' in viewer_client.get("/").content.decode()
    # Another session (the same user in another browser) starts from the default.
    client.force_login(viewer)
    assert 'aria-current="true">1h' in client.get("/").content.decode()


def test_an_empty_log_tells_the_operator_where_receipts_come_from(viewer_client):
    html = viewer_client.get("/").content.decode()
    assert "No claim requests in the last 1h" in html and "Idempotency-Key" in html


def test_an_empty_overview_says_how_to_get_webhook_and_outbox_figures(viewer_client):
    html = viewer_client.get("/?window=24h").content.decode()
    assert "No webhook deliveries and no outbox messages in the last 24h" in html
    assert "No claim requests in the last 24h" in html


def test_each_empty_chart_carries_its_reason(viewer_client):
    html = viewer_client.get("/").content.decode()
    assert 'data-empty="No webhook deliveries in the last 1h"' in html
    assert 'data-empty="No claim requests in the last 1h"' in html


def test_the_poll_pauses_while_the_pointer_is_on_a_chart(viewer_client):
    # Each poll swaps the charts out; under the pointer that would wipe the hover box.
    assert "every 15s [!document.querySelector('.chart-plot:hover')]" in viewer_client.get("/").content.decode()
